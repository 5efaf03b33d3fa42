"""The worker's logging: logs/worker.log in the data directory (0600, rotated), warnings on
stderr, secrets masked in every record, tracebacks included."""
from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path

from memoryplus.common import redact
from memoryplus.wire import protocol as P


class RedactingFormatter(logging.Formatter):
    """Masks secrets in the whole formatted record, tracebacks included."""

    def format(self, record: logging.LogRecord) -> str:
        return redact.redact(super().format(record))


def setup_logging(data_dir: Path) -> Path:
    log_dir = data_dir / P.LOG_DIR
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / P.LOG_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.close(fd)
    fmt = RedactingFormatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    file_handler = logging.handlers.RotatingFileHandler(path, maxBytes=2_000_000, backupCount=3,
                                                        encoding="utf-8")
    file_handler.setFormatter(fmt)
    err_handler = logging.StreamHandler(sys.stderr)
    err_handler.setLevel(logging.WARNING)
    err_handler.setFormatter(fmt)
    root = logging.getLogger()
    root.handlers[:] = [file_handler, err_handler]
    root.setLevel(logging.INFO)
    redact.install_log_filter(root)
    logging.captureWarnings(True)
    import warnings
    warnings.simplefilter("ignore", DeprecationWarning)
    for noisy in ("httpx", "httpcore", "neo4j", "openai", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return path
