"""``neverestctl doctor [--json]``: what is wrong with this memory, and what to do about it.

Each check ends ok, warn or fail with a one-line message and, unless ok, a one-line
hint.  The exit status is 0 when no check failed, 1 otherwise.  The doctor changes
nothing: it never creates the home, a key or a store, never migrates the store
(it reads it through a read-only connection) and never tightens a mode; it only
says what a command that opens the home would do.

What is checked:

- home: the folder exists, holds a memory, and is private (0700; no file in it
  readable by group or others);
- config: config.toml loads; an unsafe choice (``trust = "any"``) is a warning;
- key: identity.key exists, is private (0600), belongs to this user and holds a seed;
- store: memory.db opens, its schema version is this release's, ``PRAGMA quick_check`` is ok;
- daemon: one answers on the control socket (not running is a warning);
- port: where the running daemon listens (its status, else what it wrote in its lock file): a
  daemon started with ``--listen`` listens elsewhere than config.toml says; with no daemon, the
  configured listen port is free;
- peers: how many addresses are known and how many are healthy (zeroconf as the running daemon has it);
- clock: no daemon or peer reports time, so the evidence is what peers sent.  Records
  signed more than ``future_tolerance_s`` (10 minutes) ahead of this clock are refused
  as ``future``, and gossip requests outside the allowed skew as ``stale``: any such
  refusal is a warning (this clock is behind, or a peer's is ahead), and so is a held
  record from another origin signed more than a minute ahead of now.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import socket
import sqlite3
import stat
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final, Literal

from neverest.client import ControlError, ask
from neverest.clock import clock_from_env, iso, parse_time
from neverest.config import Config, ConfigError, config_warnings, load_config
from neverest.identity import IdentityError, load_or_create
from neverest.lock import LISTENING, read_holder
from neverest.memory import holdings
from neverest.memory.store import SCHEMA_VERSION, integrity_problems, open_read_only, schema_version
from neverest.paths import HOME_MARKERS, KEY_FILE, PRIVATE_UMASK, STORE_FILE, resolve_home
from neverest.peers import table as peer_table

Status = Literal["ok", "warn", "fail"]
DAEMON_TIMEOUT_S: Final = 3.0
AHEAD_WARN: Final = timedelta(minutes=1)
SKEW_REASONS: Final = ("future", "stale")


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    message: str
    hint: str = ""


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def check_home(home: Path) -> Check:
    try:
        st = home.stat()
    except FileNotFoundError:
        return Check("home", "fail", f"{home} does not exist",
                     f"`neverestctl init --home {home}` creates a new memory there (or fix the --home typo)")
    except OSError as exc:
        return Check("home", "fail", f"{home}: {exc.strerror}", "name a folder you can read")
    if not stat.S_ISDIR(st.st_mode):
        return Check("home", "fail", f"{home} is a file, not a folder", "name the folder that holds the memory")
    names = os.listdir(home)
    if names and not any(name in names for name in HOME_MARKERS):
        return Check("home", "fail", f"{home} holds other files and no memory", "name the memory's folder")
    if st.st_mode & PRIVATE_UMASK:
        return Check("home", "fail", f"{home} is open to other users (mode {_mode(st)}): they can read raw episodes",
                     f"run any neverestctl command on it (it makes the home private), or `chmod 700 {home}`")
    loose = []
    for root, dirs, files in os.walk(home):
        for name in dirs + files:
            path = Path(root) / name
            try:
                entry = path.lstat()
            except FileNotFoundError:
                continue
            if not stat.S_ISLNK(entry.st_mode) and entry.st_mode & PRIVATE_UMASK:
                loose.append(f"{path.relative_to(home)} ({_mode(entry)})")
    if loose:
        return Check("home", "warn", f"{home} is private, but not everything in it: {', '.join(sorted(loose)[:5])}",
                     f"run any neverestctl command on it (it tightens the modes), or `chmod -R go= {home}`")
    return Check("home", "ok", f"{home} is private (mode {_mode(st)})")


def check_config(home: Path) -> tuple[Check, Config | None]:
    try:
        config = load_config(home)
    except ConfigError as exc:
        return Check("config", "fail", str(exc), "fix config.toml or the NEVEREST_* variable it names"), None
    warnings = config_warnings(config)
    if warnings:
        return Check("config", "warn", "; ".join(warnings), "change it in config.toml unless you mean it"), config
    return Check("config", "ok", f"loads (trust = {config.trust!r})"), config


def check_key(home: Path) -> tuple[Check, str | None]:
    """The key check, and this memory's origin when the key is usable."""
    path = home / KEY_FILE
    try:
        st = path.stat()
    except FileNotFoundError:
        return Check("key", "warn", f"no key yet ({path})", "the first command that needs it makes one"), None
    if st.st_mode & PRIVATE_UMASK:
        return Check("key", "fail", f"{path} is readable by others (mode {_mode(st)}): anyone could sign as this "
                     "memory", f"run `chmod 600 {path}`, and consider the key leaked"), None
    try:
        identity = load_or_create(home)  # the file exists: this only reads and checks it
    except IdentityError as exc:
        return Check("key", "fail", str(exc),
                     "restore the key from a backup, or move it aside to start a new identity"), None
    return Check("key", "ok", f"origin {identity.origin} (mode {_mode(st)})"), identity.origin


def _read_only(path: Path) -> sqlite3.Connection:
    # Read-only: open_store would create a missing store and migrate an old one, and the doctor changes nothing.
    return open_read_only(path, busy_timeout_s=DAEMON_TIMEOUT_S)


def check_store(home: Path) -> tuple[Check, sqlite3.Connection | None]:
    path = home / STORE_FILE
    if not path.exists():
        return Check("store", "warn", f"no store yet ({path})", "the first command that stores something makes it"), \
            None
    broken = "the store is damaged: restore memory.db from a backup, or move it aside to start an empty memory"
    try:
        db = _read_only(path)
    except sqlite3.Error as exc:
        return Check("store", "fail", f"{path} cannot be opened: {exc}", broken), None
    try:
        version = schema_version(db)
        problems = integrity_problems(db) or ["ok"]
    except sqlite3.Error as exc:
        db.close()
        return Check("store", "fail", f"{path}: {exc}", broken), None
    if problems != ["ok"]:
        db.close()
        return Check("store", "fail", f"{path} fails its integrity check: {'; '.join(problems)[:300]}", broken), None
    if version > SCHEMA_VERSION:
        db.close()
        return Check("store", "fail", f"{path} has schema version {version}, made by a newer Neverest "
                     f"(this one knows up to {SCHEMA_VERSION})", "upgrade Neverest"), None
    if version < SCHEMA_VERSION:
        return Check("store", "warn", f"schema version {version}, older than this release's {SCHEMA_VERSION}",
                     "it is migrated the next time a command opens it"), db
    return Check("store", "ok", f"schema version {version}, integrity ok"), db


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_daemon(home: Path) -> tuple[Check, dict[str, Any] | None]:
    try:
        answer = ask(home, {"op": "status"}, timeout_s=DAEMON_TIMEOUT_S)
    except ControlError as exc:
        holder = read_holder(home)
        if holder is not None and holder.pid is not None and _alive(holder.pid):
            return Check("daemon", "fail", f"a daemon holds the home ({holder.describe()}) but does not answer: "
                         f"{exc}", f"look at its log; `kill {holder.pid}` stops it"), None
        return Check("daemon", "warn", "not running", "start `neverestd` to gossip and sleep on schedule"), None
    status = answer.get("status")
    status = status if isinstance(status, dict) else {}
    listen = status.get("listen")
    where = ", ".join(str(a) for a in listen) if isinstance(listen, list) else "?"
    return Check("daemon", "ok", f"running (version {status.get('version', '?')}, listening on {where}, "
                 f"up {status.get('uptime_s', '?')} s)"), status


def _listening(home: Path, daemon: dict[str, Any] | None) -> list[str] | None:
    """Where this memory's daemon listens: its status says, else the description it wrote in its lock
    file (a daemon that holds the home but does not answer); None when no daemon is known to run."""
    listen = daemon.get("listen") if daemon is not None else None
    if isinstance(listen, list) and listen:
        return [str(a) for a in listen]
    holder = read_holder(home)
    if holder is None or holder.pid is None or not _alive(holder.pid) or not holder.about.startswith(LISTENING):
        return None
    return [a.strip() for a in holder.about.removeprefix(LISTENING).split(",") if a.strip()] or None


def check_port(config: Config, daemon: dict[str, Any] | None, home: Path | None = None) -> Check:
    # The running daemon's own address first: `neverestd --listen` overrides config.toml, and the
    # configured port being free says nothing about where peers reach this memory now.
    listening = _listening(home, daemon) if home is not None else None
    if listening:
        held = f"{', '.join(listening)} is held by this memory's daemon"
        configured = config.listen.rpartition(":")[2]
        if configured == "0":
            return Check("port", "ok", f"{held} (any free port, as config.toml's listen = {config.listen!r} asks)")
        if any(a.rpartition(":")[2].rstrip("/") == configured for a in listening):
            return Check("port", "ok", held)
        return Check("port", "ok", f"{held}, started with --listen (config.toml's listen = {config.listen!r} is "
                     "used when it starts without it)")
    host, _, port_text = config.listen.rpartition(":")
    host = host.strip("[]")
    try:
        port = int(port_text)
        if not host or not 0 <= port <= 65535:
            raise ValueError
    except ValueError:
        return Check("port", "fail", f"listen = {config.listen!r} is not HOST:PORT", 'write it like "0.0.0.0:7428"')
    if port == 0:
        return Check("port", "ok", f"{config.listen}: any free port")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return Check("port", "fail" if daemon is None else "warn", f"{config.listen} is in use by another program",
                         "stop it, or choose another port with `listen` in config.toml or --listen")
        if exc.errno in (errno.EACCES, errno.EPERM):
            return Check("port", "fail", f"{config.listen}: not allowed to listen there ({exc.strerror})",
                         "choose a port above 1023")
        return Check("port", "fail", f"{config.listen}: {exc.strerror}", "choose an address of this machine")
    return Check("port", "ok", f"{config.listen} is free")


def check_peers(db: sqlite3.Connection | None, config: Config, now: datetime,
                daemon: dict[str, Any] | None = None) -> Check:
    try:
        known = peer_table.listing(db) if db is not None else []
        healthy = peer_table.healthy(db, now) if db is not None else []
    except sqlite3.Error as exc:
        return Check("peers", "fail", f"the peer table cannot be read: {exc}", "see the store check")
    static = len(config.peers)
    # Zeroconf as the running daemon has it (`neverestd --no-mdns` overrides config.toml).
    mdns = daemon["mdns"] if daemon is not None and isinstance(daemon.get("mdns"), bool) else config.mdns
    found = "zeroconf on" if mdns else "zeroconf off"
    if config.directory:
        found += ", a directory"
    text = f"{len(known)} address(es) known, {len(healthy)} healthy; {static} in config; {found}"
    if not known and not static and not mdns and not config.directory and not config.folder \
            and not config.commons_url:
        return Check("peers", "warn", text, "nothing will be shared: add a peer (`neverestctl peer add URL`), "
                     "`peers` in config.toml, zeroconf, a directory, a folder or a commons")
    if known and not healthy:
        return Check("peers", "warn", text, "every known address is backing off after failures: "
                     "`neverestctl peer list` shows why")
    return Check("peers", "ok", text)


def check_clock(db: sqlite3.Connection | None, own_origin: str | None, now: datetime) -> Check:
    if db is None:
        return Check("clock", "ok", f"{iso(now)}; nothing received yet to compare with")
    try:
        refused = sorted(((r.source, r.reason, r.count, r.last) for r in holdings.refusals(db)
                          if r.reason in SKEW_REASONS), key=lambda r: r[3], reverse=True)
        newest = holdings.newest_signed_by_others(db, own_origin or "")
    except sqlite3.Error as exc:
        return Check("clock", "warn", f"cannot read what peers sent: {exc}", "see the store check")
    if refused:
        total = sum(int(r[2]) for r in refused)
        source, reason, _, last = refused[0]
        return Check("clock", "warn", f"{total} input(s) refused as signed too far in the future or with a stale "
                     f"timestamp (last: {reason} from {source} at {last})",
                     "this clock may be behind, or a peer's ahead: check that NTP runs here (`timedatectl`)")
    if newest:
        try:
            ahead = parse_time(str(newest)) - now
        except ValueError:
            ahead = timedelta(0)
        if ahead > AHEAD_WARN:
            return Check("clock", "warn", f"a record received here was signed {int(ahead.total_seconds())} s "
                         "ahead of this clock", "this clock may be behind: check that NTP runs here")
    return Check("clock", "ok", f"{iso(now)}; nothing received was signed ahead of it")


def diagnose(home: Path) -> list[Check]:
    """Every check on ``home``, in order; later checks are skipped when the home itself is unusable."""
    home_check = check_home(home)
    checks = [home_check]
    if home_check.status == "fail" and not home.is_dir():
        return checks
    config_check, config = check_config(home)
    checks.append(config_check)
    config = config or Config()
    key_check, own = check_key(home)
    checks.append(key_check)
    store_check, db = check_store(home)
    checks.append(store_check)
    try:
        daemon_check, status = check_daemon(home)
        checks.append(daemon_check)
        checks.append(check_port(config, status, home))
        try:
            now = clock_from_env().now()
        except ValueError as exc:
            checks.append(Check("clock", "fail", str(exc), "fix or unset NEVEREST_NOW"))
            return checks
        checks.append(check_peers(db, config, now, status))
        checks.append(check_clock(db, own, now))
    finally:
        if db is not None:
            db.close()
    return checks


MARKS: Final[dict[Status, str]] = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}


def cmd_doctor(args: argparse.Namespace) -> int:
    # resolve_home, not find_home: the doctor reports a missing or open home instead of refusing or fixing it.
    home = resolve_home(getattr(args, "home", None))
    checks = diagnose(home)
    failed = any(c.status == "fail" for c in checks)
    if getattr(args, "json", False):
        print(json.dumps({"home": str(home), "ok": not failed, "checks": [asdict(c) for c in checks]}))
    else:
        for c in checks:
            print(f"{MARKS[c.status]}  {c.name:<7} {c.message}")
            if c.hint and c.status != "ok":
                print(f"{'':13} -> {c.hint}")
    return 1 if failed else 0


def add_parser(sub: Any, common: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """``neverestctl doctor``: ``sub`` is the subparsers object of neverestctl's parser, ``common``
    the parent parser of the options every command takes."""
    p: argparse.ArgumentParser = sub.add_parser(
        "doctor", parents=[common] if common else [],
        help="check the home, key, store, daemon, port, peers and clock; say what to fix",
        description="Check this memory without changing anything. Each check prints ok, warn or FAIL with a "
        "hint. Exit status 0 when nothing failed, 1 otherwise.")
    p.add_argument("--json", action="store_true", help='one JSON object: {"home", "ok", "checks": [...]}')
    p.set_defaults(func=cmd_doctor)
    return p
