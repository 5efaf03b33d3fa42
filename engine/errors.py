"""The engine's errors a user can act on (the worker sends their class names and messages):
an operation's (EngineError) and a bank's database's (StoreError)."""
from __future__ import annotations


class EngineError(RuntimeError):
    """An operation failed for a reason the user can act on; the message says what to do."""


class UnknownBankError(EngineError):
    pass


class EmbeddingMismatchError(EngineError):
    pass


class StoreError(RuntimeError):
    """A bank cannot be opened; the message says which and what to do."""


class BankLockedError(StoreError):
    pass


class WriteStoreError(StoreError):
    """A write to a bank's database failed with an I/O error: retryable (the turn is retried)."""
    errno = 5   # EIO
