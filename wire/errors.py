"""The failures of a memory operation that a caller treats differently, each with a stable code.

An error crosses the wire as its `code` (ErrorInfo.code in wire/protocol.py), never as a class
name or a message to match: the worker sends the code of the error its in-process service
raised, and the remote service raises the class of that code again. The message is for people
(already redacted); `origin` keeps the name of the exception behind it (the engine's
UnknownBankError, StoreError, ...) for logs and for ErrorInfo.type.

This module imports nothing but the standard library: the plugin, the UI and the CLI catch
these classes without loading the engine.
"""
from __future__ import annotations


class ServiceError(RuntimeError):
    """A memory operation failed. Subclasses name what the caller can do about it."""
    code = "internal"
    # An error the user can act on (the message says how): logged as one line, no traceback.
    expected = True

    def __init__(self, message: str = "", *, origin: str = ""):
        super().__init__(message or self.code)
        self.origin = origin or type(self).__name__


class Internal(ServiceError):
    """An unexpected failure (a bug, or an error of a library nobody classified)."""
    code = "internal"
    expected = False


class BadParams(ServiceError):
    """The request's own parameters are invalid: sending it again will not help."""
    code = "bad_params"


class UnknownOperation(ServiceError):
    code = "unknown_operation"


class NotOwner(ServiceError):
    """An operation reserved to the process that started the worker."""
    code = "not_owner"


class UnknownBank(ServiceError):
    """Nothing is stored in this bank yet (a read of a bank that does not exist)."""
    code = "unknown_bank"


class BadBankName(ServiceError):
    """The bank's name cannot be used (empty, too long, ...)."""
    code = "bad_bank_name"


class EmbeddingMismatch(ServiceError):
    """The bank was built with another embedder (or dimension) than the one configured."""
    code = "embedding_mismatch"


class BankInUse(ServiceError):
    """Another process holds the bank's database (its lock)."""
    code = "bank_in_use"


class StoreFailure(ServiceError):
    """The bank's database cannot be opened or written (I/O, damage)."""
    code = "store_error"


class EngineFailure(ServiceError):
    """The engine refused the operation for a reason the message explains; not retryable."""
    code = "engine_error"


class SettingsInvalid(ServiceError):
    code = "settings_invalid"


class ProviderError(ServiceError):
    """The LLM or embedding provider failed or answered unusably: retryable later."""
    code = "provider_error"


class RateLimited(ProviderError):
    """The provider refused for its rate limit: retry later."""
    code = "rate_limited"


class NotAccepted(ServiceError):
    """The worker is stopping and did not run the request: send it to the next worker."""
    code = "not_accepted"


class Cancelled(ServiceError):
    code = "cancelled"


class Timeout(ServiceError, TimeoutError):
    """No answer in time (a late answer is dropped)."""
    code = "timeout"


class WorkerUnavailable(ServiceError):
    """No worker can serve the request (it cannot start, its breaker is open, it is gone)."""
    code = "worker_unavailable"


def _all(cls: type) -> list[type]:
    return [cls] + [c for sub in cls.__subclasses__() for c in _all(sub)]


BY_CODE: dict[str, type[ServiceError]] = {c.code: c for c in _all(ServiceError)[1:]}


def from_code(code: str | None, message: str, origin: str = "") -> ServiceError:
    """The error a code stands for (an unknown or missing code: Internal)."""
    cls = BY_CODE.get(code or "", Internal)
    return cls(message, origin=origin)
