"""Keeping secrets out of logs, status texts and error messages.

Two nets: the exact secret values this process was given (registered when settings arrive),
and the shapes of real keys (OpenAI `sk-…`, Google `AIza…`, bearer tokens, URL passwords).
"""
from __future__ import annotations

import logging
import re
import threading

_known: set[str] = set()
_lock = threading.Lock()
_PATTERNS = [
    re.compile(r"sk-(?:proj-|ant-|svcacct-)?[A-Za-z0-9_\-]{16,}"),
    re.compile(r"AIza[0-9A-Za-z_\-]{30,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{12,}"),
    re.compile(r"(?i)((?:api[_-]?key|password|passwd|secret|token)\s*[=:]\s*)[^\s,;'\"]+"),
    re.compile(r"(?i)(\w+://[^:/\s@]+:)[^@\s/]+(@)"),
]
MASK = "[redacted]"


def host_of(url: str) -> str:
    """The host[:port] of an endpoint, for messages: never its path, query or credentials."""
    from urllib.parse import urlsplit
    try:
        parts = urlsplit(url if "//" in url else f"//{url}")
        host = parts.hostname or ""
        return f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        return "the configured endpoint"


def register(*secrets: str) -> None:
    """Remember secret values so that they are masked wherever they appear."""
    with _lock:
        _known.update(s for s in secrets if isinstance(s, str) and len(s) >= 4)


def secret_values(settings, credentials=None) -> list[str]:
    """The secret values of a configuration: the options config/schema.py declares secret (from
    a Settings or its dict) and the keys among the credentials. The one list of them."""
    from memoryplus.config.schema import SECRET_OPTIONS
    get = settings.get if isinstance(settings, dict) else (lambda k: getattr(settings, k, ""))
    out = [str(get(k) or "") for k in sorted(SECRET_OPTIONS)]
    if credentials is not None:
        data = credentials if isinstance(credentials, dict) else credentials.model_dump()
        out += [v for k, v in data.items() if "key" in k and isinstance(v, str)]
    return out


def register_config(settings, credentials=None) -> None:
    """Mask every secret of a configuration (see secret_values)."""
    register(*secret_values(settings, credentials))


def redact(text: str) -> str:
    if not text:
        return text
    with _lock:
        known = sorted(_known, key=len, reverse=True)
    for s in known:
        text = text.replace(s, MASK)
    for p in _PATTERNS:
        text = p.sub(lambda m: (m.group(1) if m.lastindex and m.lastindex >= 1 else "") + MASK
                     + (m.group(2) if m.lastindex and m.lastindex >= 2 else ""), text)
    return text


class RedactingFilter(logging.Filter):
    """Masks secrets in every record passing through a handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string must not break logging
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, ()
        return True


def install_log_filter(logger: logging.Logger | None = None) -> None:
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
