"""Where a memory lives on disk.

The home folder is ``--home DIR``, else ``$NEVEREST_HOME``, else ``~/.neverest``
(DESIGN §7).  Every file the daemon and ``neverestctl`` share is named here, so
that no other module invents a path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

HOME_ENV: Final = "NEVEREST_HOME"
KEY_FILE: Final = "identity.key"
STORE_FILE: Final = "memory.db"
CONFIG_FILE: Final = "config.toml"
INBOX_FILE: Final = "inbox.jsonl"
LESSONS_FILE: Final = "lessons.jsonl"


def resolve_home(flag: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The home folder chosen by flag, then environment, then the default."""
    environ = os.environ if env is None else env
    if flag:
        return Path(flag).expanduser()
    if environ.get(HOME_ENV):
        return Path(environ[HOME_ENV]).expanduser()
    return Path("~/.neverest").expanduser()


def ensure_home(home: Path) -> Path:
    """Create the home folder, private to its owner, if it does not exist yet."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    return home
