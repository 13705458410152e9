"""Where a memory lives on disk, which folders may become one, and who may read it.

The home folder is ``--home DIR``, else ``$NEVEREST_HOME``, else ``~/.neverest``.
Every file the daemon and ``neverestctl`` share is named here, so that no other
module invents a path.

A mistyped ``--home`` must not silently start a second memory with a new identity,
so only two things create a home: the default location (``~/.neverest``, made on
first use, also when ``--home`` or ``$NEVEREST_HOME`` names it) and ``neverestctl init``.  A home named by ``--home`` or
``$NEVEREST_HOME`` must already exist; an existing *empty* folder counts (it is a
home waiting for its first use), and so does a folder holding any of the files a
memory writes.  A folder holding other things is refused: it is most likely a
typo for another folder, and making it private would change the modes of files
that are not ours.

Everything in a home is private to its owner whatever mode the folder had before
(its episodes are raw agent sessions): when a home is opened the folder is made 0700
and everything in it loses its group and other bits, except the key, which
``identity`` refuses instead; the command-line tools run under umask 077 so that
files SQLite creates later (``-wal``, ``-shm``) are born private.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Final

HOME_ENV: Final = "NEVEREST_HOME"
DEFAULT_HOME: Final = "~/.neverest"
KEY_FILE: Final = "identity.key"
STORE_FILE: Final = "memory.db"
CONFIG_FILE: Final = "config.toml"
INBOX_FILE: Final = "inbox.jsonl"
LESSONS_FILE: Final = "lessons.jsonl"
LOCK_FILE: Final = "daemon.lock"
RELAY_DIR: Final = "relay"  # the project logs (neverest/relay.py): one JSON Lines file per project
# Any of these in a folder shows that a memory lives (or was configured to live) there.
HOME_MARKERS: Final = (KEY_FILE, STORE_FILE, CONFIG_FILE, INBOX_FILE, LESSONS_FILE, LOCK_FILE, RELAY_DIR)
PRIVATE_UMASK: Final = 0o077


class HomeError(Exception):
    """The home folder cannot be used as named; the message says what to do."""


def resolve_home(flag: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The home folder chosen by flag, then environment, then the default."""
    environ = os.environ if env is None else env
    if flag:
        return Path(flag).expanduser()
    if environ.get(HOME_ENV):
        return Path(environ[HOME_ENV]).expanduser()
    return Path(DEFAULT_HOME).expanduser()


def is_default(flag: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> bool:
    """Whether the home comes from neither ``--home`` nor ``$NEVEREST_HOME`` (the one made on first use)."""
    environ = os.environ if env is None else env
    return not flag and not environ.get(HOME_ENV)


def find_home(flag: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None, *,
              init: bool = False) -> Path:
    """The home chosen by flag, environment or default, opened: created only when it is the default
    location or ``init`` asks for it.  Raises HomeError."""
    home = resolve_home(flag, env)
    # The default location is no typo however it is named: NEVEREST_HOME=~/.neverest creates it as
    # leaving NEVEREST_HOME unset does.
    default = os.path.abspath(Path(DEFAULT_HOME).expanduser()) == os.path.abspath(home)
    return open_home(home, create=init or default or is_default(flag, env))


def _is_home(path: Path) -> bool:
    """An empty folder, or one holding a file only a memory writes."""
    with os.scandir(path) as entries:
        names = [entry.name for entry in entries]
    return not names or any(name in names for name in HOME_MARKERS)


def open_home(path: Path, *, create: bool) -> Path:
    """Check that ``path`` can be a memory's home and make it private to its owner.

    A missing folder is created (mode 0700) only when ``create``; otherwise, and when
    ``path`` is a file or a folder of other things, HomeError says what is wrong.
    """
    path = path.expanduser()
    try:
        st = path.stat()
    except FileNotFoundError:
        if not create:
            raise HomeError(f"there is no memory at {path}: the folder does not exist (a typo?); "
                            f"`neverestctl init --home {path}` creates a new memory there") from None
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise HomeError(f"cannot create the home folder {path}: {exc.strerror}") from None
    except NotADirectoryError:
        raise HomeError(f"the home {path} is inside a file, not a folder") from None
    except OSError as exc:
        raise HomeError(f"cannot use the home {path}: {exc.strerror}") from None
    else:
        if not stat.S_ISDIR(st.st_mode):
            raise HomeError(f"the home {path} is a file, not a folder: name the folder that holds the memory")
        try:
            is_home = _is_home(path)
        except OSError as exc:
            raise HomeError(f"cannot read the home folder {path}: {exc.strerror}") from None
        if not is_home:
            raise HomeError(f"{path} holds other files and no Neverest memory (no {KEY_FILE}, {STORE_FILE} or "
                            f"{CONFIG_FILE}); name the memory's folder, or a new or empty one for a new memory")
    secure_home(path)
    return path


def init_home(path: Path) -> Path:
    """``neverestctl init``: the folder for a new memory (or an existing one, unchanged but made private)."""
    return open_home(path, create=True)


def ensure_home(home: Path) -> Path:
    """Create the home folder, private to its owner, if it does not exist yet (no checks: for callers
    that were handed an already opened home, and for tests)."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    return home


def _chmod_private(path: Path, st: os.stat_result, mode: int) -> bool:
    if stat.S_IMODE(st.st_mode) == mode:
        return False
    try:
        os.chmod(path, mode)
    except FileNotFoundError:
        return False  # removed meanwhile (a temporary file renamed into place)
    except OSError as exc:
        owner = f" (it belongs to uid {st.st_uid})" if hasattr(os, "getuid") and st.st_uid != os.getuid() else ""
        raise HomeError(f"cannot make {path} private to its owner{owner}: {exc.strerror}; "
                        f"run `chmod go= {path}`") from None
    return True


def secure_home(home: Path) -> list[Path]:
    """Make the home 0700 and take group and other bits off everything in it; returns what changed.

    Symbolic links are neither followed nor changed (what they point at is not ours).  The home
    itself is closed first, so no other user can swap an entry for a link while we walk it.  The key
    is left as it is: a key others could read may have been copied, and its owner must hear of it
    (``identity`` refuses it with the ``chmod`` to run), not have it silently fixed.
    """
    changed: list[Path] = []
    if _chmod_private(home, home.stat(), 0o700):
        changed.append(home)
    stack = [home]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                names = [entry.name for entry in entries]
        except FileNotFoundError:
            continue
        for name in names:
            path = folder / name
            if folder == home and name == KEY_FILE:
                continue
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                continue
            if _chmod_private(path, st, stat.S_IMODE(st.st_mode) & ~PRIVATE_UMASK):
                changed.append(path)
            if stat.S_ISDIR(st.st_mode):
                stack.append(path)
    return changed


def use_private_umask() -> int:
    """Make every file this process creates from now on private to its owner (umask 077); returns the
    old umask.  The command-line tools call it first thing: SQLite, logging and renders create files
    with the process's umask."""
    return os.umask(PRIVATE_UMASK)


@contextmanager
def private_umask() -> Iterator[None]:
    """Umask 077 for the duration of the block."""
    old = os.umask(PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(old)
