"""How the daemon (and any long-running tool) logs: readable lines or JSON lines, to stderr or a file.

A log file is opened for appending, created 0600 (logs name peers and lessons), and
reopened whenever it is moved or removed (``logging.handlers.WatchedFileHandler``),
so ``logrotate`` can rotate it without a signal to the daemon.  Third-party HTTP
clients log every round trip at INFO; they are kept at WARNING.
"""

from __future__ import annotations

import io
import json
import logging
import logging.handlers
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Final

from neverest.clock import iso

LEVELS: Final = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
QUIET_LOGGERS: Final = ("httpx", "httpcore", "hpack")  # one INFO line per HTTP round trip otherwise
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def parse_level(name: str) -> int:
    """A level name (any case) as a ``logging`` level; ValueError names the valid ones."""
    level = LEVELS.get(name.strip().lower())
    if level is None:
        raise ValueError(f"log level {name!r} is not one of {', '.join(LEVELS)}")
    return level


class JsonFormatter(logging.Formatter):
    """One JSON object per line: at (UTC ISO time), level, logger, message, and exc when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, str] = {"at": iso(datetime.fromtimestamp(record.created).astimezone()),
                                "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


class PrivateWatchedFileHandler(logging.handlers.WatchedFileHandler):
    """A WatchedFileHandler whose file, on first open and on every reopen after a rotation, is born 0600
    whatever the process's umask."""

    def _open(self) -> io.TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return open(fd, "a", encoding=self.encoding or "utf-8", errors=self.errors)


def setup_logging(*, level: str = "info", json: bool = False, file: Path | None = None) -> None:
    """Send the root logger's records at ``level`` and above to ``file`` (appended) or else stderr.

    Replaces any handlers set before (so it can be called again, e.g. by tests).  ValueError for an
    unknown level or a file that cannot be opened, with a message naming it.
    """
    threshold = parse_level(level)
    handler: logging.Handler
    if file is not None:
        try:
            handler = PrivateWatchedFileHandler(os.fspath(file), encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot open the log file {file}: {exc.strerror}") from None
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(threshold)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, threshold))
