"""Shared test helpers: deterministic identities from the wire vectors; and the guard of the real home.

The suite never touches the person's own agents or memory.  For the whole session ``HOME`` is a fresh
temporary folder (and ``CLAUDE_CONFIG_DIR``, ``CODEX_HOME``, ``GEMINI_CLI_HOME``, ``NEVEREST_HOME``,
``XDG_CONFIG_HOME`` are unset or pointed into it), so that a default folder (``~/.claude/projects``,
``~/.codex``, ``~/.neverest``) can only name a throwaway one; tests that need a home of their own still set
it.  And a guard takes the names, sizes and modification times of everything under the real ``~/.claude``,
``~/.codex`` and ``~/.neverest`` (and ``~/.claude.json``, and the MCP files of Claude Desktop, Cursor,
Windsurf and Gemini CLI, one by one) at the start and compares them at the end: a change where Neverest
writes (``~/.claude/settings.json``, ``~/.claude.json``, a project's ``memory/`` folder,
``~/.codex/config.toml``, anything in ``~/.neverest``, those MCP files) fails the run, naming the paths.
Other changes under ``~/.claude`` or ``~/.codex`` are the agents' own (the agent running this suite writes its
transcript, todos and caches there as it goes): they are listed, and do not fail the run; so are changes
in a ``~/.neverest`` whose daemon was running when the suite started, and memory files of projects in
another pytest run's temporary folder (another run on the machine, of a branch without consent, wrote them).
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import pwd
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nacl.signing
import pytest

VECTORS = Path(__file__).parent / "vectors"

_WATCHED = (".claude", ".codex", ".neverest", ".claude.json")
# The files `setup` adds its MCP server to for the agents reached by MCP only (their folders are big: only
# these files are watched).
_MCP_FILES = (".config/Claude/claude_desktop_config.json",
              "Library/Application Support/Claude/claude_desktop_config.json", ".cursor/mcp.json",
              ".codeium/windsurf/mcp_config.json", ".gemini/settings.json")
_MOVED_ENV = ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME", "NEVEREST_HOME")
Snapshot = dict[str, tuple[int, int, bool]]  # path -> (mtime_ns, size, is a folder)


def _real_homes() -> list[Path]:
    """The person's home (the password database's, and $HOME's when it differs); $NEVEREST_GUARD_HOMES
    names others instead (the guard's own test runs it on a made-up home)."""
    if os.environ.get("NEVEREST_GUARD_HOMES"):
        return sorted(Path(p) for p in os.environ["NEVEREST_GUARD_HOMES"].split(os.pathsep) if p)
    homes = {Path(pwd.getpwuid(os.getuid()).pw_dir)}
    if os.environ.get("HOME"):
        homes.add(Path(os.environ["HOME"]))
    return sorted(homes)


def _snapshot(homes: list[Path]) -> Snapshot:
    """Every entry under the watched folders of ``homes``, symlinks not followed."""
    found: Snapshot = {}

    def add(path: Path) -> None:
        try:
            st = path.lstat()
        except OSError:
            return
        found[os.fspath(path)] = (st.st_mtime_ns, st.st_size, path.is_dir() and not path.is_symlink())

    for home in homes:
        for name in _MCP_FILES:
            add(home / name)
        for name in _WATCHED:
            root = home / name
            add(root)
            if not root.is_dir() or root.is_symlink():
                continue
            for folder, dirs, files in os.walk(root):
                for entry in [*dirs, *files]:
                    add(Path(folder) / entry)
    return found


def _neverest_writes(path: str, home: Path) -> bool:
    """Whether ``path`` is where Neverest itself writes (so a change there is the suite's doing)."""
    rel = Path(path).relative_to(home).parts
    if rel[0] == ".neverest" or rel == (".claude.json",) or Path(*rel).as_posix() in _MCP_FILES:
        return True
    if rel[0] == ".claude":  # (the folders above a memory/ folder change whenever the agent adds a project)
        return rel[1:] == ("settings.json",) or (len(rel) >= 4 and rel[1] == "projects" and rel[3] == "memory")
    return rel[1:] == ("config.toml",)  # .codex


def _daemon_running(home: Path) -> bool:
    try:
        fd = os.open(home / ".neverest" / "daemon.lock", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@dataclass
class _Guard:
    homes: list[Path] = field(default_factory=list)
    before: Snapshot = field(default_factory=dict)
    daemons: list[Path] = field(default_factory=list)  # real homes whose neverestd ran when the suite started
    throwaway: Path | None = None
    environ: dict[str, str | None] = field(default_factory=dict)


_GUARD = _Guard()


def pytest_configure(config: pytest.Config) -> None:
    homes = _real_homes()
    throwaway = Path(tempfile.mkdtemp(prefix="neverest-test-home-"))
    _GUARD.homes, _GUARD.before, _GUARD.throwaway = homes, _snapshot(homes), throwaway
    _GUARD.daemons = [h for h in homes if _daemon_running(h)]
    _GUARD.environ = {k: os.environ.get(k) for k in ("HOME", "XDG_CONFIG_HOME", *_MOVED_ENV)}
    os.environ["HOME"] = os.fspath(throwaway)
    os.environ["XDG_CONFIG_HOME"] = os.fspath(throwaway / ".config")
    for name in _MOVED_ENV:
        os.environ.pop(name, None)


def project_slug(folder: str) -> str:
    """Claude Code's folder name for a working folder (neverest.agents.memory_file.project_slug, for the
    ASCII paths of temporary folders, without importing Neverest before HOME is moved)."""
    return "".join(ch if ch.isascii() and ch.isalnum() else "-" for ch in folder)


def _another_runs(path: str, home: Path, mine: str) -> bool:
    """Whether a memory file names another pytest run's temporary folder (the project of a test of another
    run on this machine, not of this one, whose temporary folder's name is ``mine``)."""
    rel = Path(path).relative_to(home).parts
    if len(rel) < 3 or rel[:2] != (".claude", "projects"):
        return False
    runs = project_slug(os.fspath(Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}"))
    return rel[2].startswith(runs + "-") and not (rel[2] == mine or rel[2].startswith(mine + "-"))


def home_changes(basetemp: Path) -> tuple[list[str], list[str], list[str]]:
    """The paths changed under the real homes since the start: (where Neverest writes, the same but naming
    another pytest run's temporary folder, elsewhere)."""
    after = _snapshot(_GUARD.homes)
    changed = sorted(p for p in _GUARD.before.keys() | after.keys() if _GUARD.before.get(p) != after.get(p))
    mine = project_slug(os.fspath(basetemp))
    ours: list[str] = []
    others: list[str] = []
    theirs: list[str] = []
    for path in changed:
        home = next(h for h in _GUARD.homes if Path(path).is_relative_to(h))
        if not _neverest_writes(path, home) or home in _GUARD.daemons:
            theirs.append(path)
        else:
            (others if _another_runs(path, home, mine) else ours).append(path)
    return ours, others, theirs


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _GUARD.throwaway is None:
        return
    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = factory.getbasetemp() if isinstance(factory, pytest.TempPathFactory) else _GUARD.throwaway
    ours, others, theirs = home_changes(basetemp)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")

    def say(text: str, **markup: bool) -> None:
        if reporter is not None:
            reporter.write_line(text, **markup)
        else:
            print(text)

    if theirs:
        say(f"home guard: {len(theirs)} path(s) under the real ~/.claude, ~/.codex or ~/.neverest changed during "
            "the run where Neverest never writes (an agent at work?): " + ", ".join(theirs[:10]))
    if others:
        say(f"home guard: {len(others)} memory file path(s) under the real ~/.claude changed, of projects in "
            f"another test run's temporary folder (not this run's, {basetemp}): that run wrote them: "
            + ", ".join(others[:10]))
    if ours:
        say(f"home guard: the suite changed the real home where Neverest writes, {len(ours)} path(s): "
            + ", ".join(ours[:20]), red=True, bold=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    for name, value in _GUARD.environ.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if _GUARD.throwaway is not None:
        shutil.rmtree(_GUARD.throwaway, ignore_errors=True)


def vector_identities() -> list[dict[str, str]]:
    return list(json.loads((VECTORS / "identities.json").read_text())["keys"])


@pytest.fixture
def signing_key() -> nacl.signing.SigningKey:
    """The first deterministic identity of the vectors (origin 34750f98bd59fcfc)."""
    return nacl.signing.SigningKey(bytes.fromhex(vector_identities()[0]["seed_hex"]))


@pytest.fixture
def other_key() -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey(bytes.fromhex(vector_identities()[1]["seed_hex"]))
