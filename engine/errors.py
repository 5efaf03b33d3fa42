"""The engine's errors a user can act on (the worker sends their class names and messages)."""
from __future__ import annotations


class EngineError(RuntimeError):
    """An operation failed for a reason the user can act on; the message says what to do."""


class UnknownBankError(EngineError):
    pass


class EmbeddingMismatchError(EngineError):
    pass
