"""The project log (the relay): what was said and done in a project, for the next model to pick up.

One JSON object per line, UTF-8, in ``<home>/relay/<project key>.jsonl`` (PROTOCOL.md, "The project
log"), with the fields of the protocol seed:

    at        when, ISO 8601 UTC with microseconds
    project   the project, as normalised by ``project_name``
    model     who wrote the line: the model the conversation is with ("" for the person's own notes)
    role      user, assistant or note
    kind      user, assistant, correction, deploy or note
    text      the words; a correction is the person's words; a deploy reports that something shipped

The log is raw stream: it never leaves the machine (nothing publishes, gossips or syncs it), and
``neverestctl forget`` and ``export`` cover it.  Nothing in it tells a model what to do: the
handoff built from it is framed as observations of earlier work.

**The project key** (the file's name) is a readable slug of the project's last path part and a
BLAKE2b-64 of the normalised project, ``shop-3f2a9c1b7d0e4a55``: stable for a project whatever
process writes it, and two folders of one name never share a log.  A project that looks like a path
(it holds ``/``, or starts with ``~`` or ``.``) is expanded, made absolute against the caller's
working folder and normalised (``..`` and a trailing ``/`` removed; symbolic links are not resolved,
so the key does not depend on what exists); anything else is a name, taken as it is once stripped.

**Bounds.** A text is cut to ``MAX_TEXT_CHARS`` (its head and its tail kept, the cut marked), a model
name to ``MAX_MODEL_CHARS``, a project to ``MAX_PROJECT_CHARS``.  A file is rotated when a line would
take it over ``MAX_FILE_BYTES``: it becomes ``<key>.1.jsonl`` (replacing the one rotated before),
so a project holds at most twice that on disk and the oldest lines go first.  A reader skips a line
over ``MAX_LINE_BYTES`` or that is not a valid entry, and goes on.

**Durability and concurrency.** ``append`` takes an exclusive ``flock`` on the file, rotates if it
must, writes the line in one ``O_APPEND`` write and fsyncs it (and the folder when a file was made)
before it returns: an acknowledged line survives kill -9.  The daemon's proxy, ``neverestctl relay
--note`` and the MCP tool may all append to one project at once.  A line cut by a crash is
terminated before the next one is written, so it costs only itself.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from hashlib import blake2b
from pathlib import Path
from typing import Any, Final

from neverest.clock import iso, parse_time
from neverest.paths import RELAY_DIR

KINDS: Final = ("user", "assistant", "correction", "deploy", "note")
ROLES: Final = ("user", "assistant", "note")
MAX_TEXT_CHARS: Final = 8000
MAX_MODEL_CHARS: Final = 200
MAX_PROJECT_CHARS: Final = 4096
# A line holds at most MAX_TEXT_CHARS + MAX_PROJECT_CHARS characters; escaped as JSON that is well
# under this (a control character escapes to 6 bytes, anything else to at most 4).
MAX_LINE_BYTES: Final = 128 * 1024
MAX_FILE_BYTES: Final = 1024 * 1024
# The handoff: how many lines of recent work by default, how much of each line, the whole text at most,
# and how many corrections and deploys (the newest) it carries.
DEFAULT_LIMIT: Final = 20
HANDOFF_LINE_CHARS: Final = 600
MAX_HANDOFF_CHARS: Final = 8000
MAX_ALWAYS: Final = 20
_TAIL_KEEP: Final = 2000  # the characters of a cut text's end that are kept
_BLOCK: Final = 64 * 1024
_SLUG: Final = re.compile(r"[^a-z0-9]+")


class RelayError(ValueError):
    """A line that cannot be written as asked (an unknown kind or role, no text); the caller's fault."""


@dataclass(frozen=True, slots=True)
class Entry:
    at: str
    project: str
    model: str
    role: str
    kind: str
    text: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


# -- the project and its files -------------------------------------------------------------------


def project_name(project: str) -> str:
    """The project as the log records it (see the module docstring): a path normalised, or a name."""
    text = project.strip()
    if not text:
        raise RelayError("the project is empty: give its folder or its name")
    if "/" in text or text.startswith(("~", ".")):
        text = os.path.normpath(os.path.abspath(os.path.expanduser(text)))
    return _valid_text(text)[:MAX_PROJECT_CHARS]


def project_key(project: str) -> str:
    """The file name (without ``.jsonl``) of ``project``'s log: a slug and a BLAKE2b-64 of the normalised project."""
    name = project_name(project)
    digest = blake2b(name.encode("utf-8"), digest_size=8).hexdigest()
    last = name.rstrip("/").rsplit("/", 1)[-1]
    slug = _SLUG.sub("-", last.lower()).strip("-")[:40].strip("-") or "project"
    return f"{slug}-{digest}"


def relay_dir(home: Path) -> Path:
    return home / RELAY_DIR


def relay_paths(home: Path, project: str) -> tuple[Path, Path]:
    """``project``'s current file and its rotated one (either may not exist)."""
    key = project_key(project)
    folder = relay_dir(home)
    return folder / f"{key}.jsonl", folder / f"{key}.1.jsonl"


# -- writing -------------------------------------------------------------------------------------


def _cut(text: str, limit: int, *, tail: int = 0) -> str:
    """``text`` at most ``limit`` characters: its head (and its last ``tail`` characters), the cut marked."""
    if len(text) <= limit:
        return text
    mark = f" [… {len(text) - limit} characters cut …] "
    keep_tail = min(tail, limit // 2)
    head = max(limit - keep_tail - len(mark), 0)
    return text[:head] + mark + (text[-keep_tail:] if keep_tail else "")


def _valid_text(value: str) -> str:
    """Lone surrogates (binary read as text) become '?': the line must be UTF-8."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "replace").decode("utf-8")


def entry(project: str, *, model: str, role: str, kind: str, text: str, now: datetime) -> Entry:
    """The line ``append`` writes, checked and bounded.  Raises RelayError."""
    if kind not in KINDS:
        raise RelayError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    if role not in ROLES:
        raise RelayError(f"role {role!r} is not one of {', '.join(ROLES)}")
    text = _valid_text(text).strip()
    if not text:
        raise RelayError("the text is empty")
    model = " ".join(_valid_text(model).split())[:MAX_MODEL_CHARS]
    return Entry(at=iso(now), project=project_name(project), model=model, role=role, kind=kind,
                 text=_cut(text, MAX_TEXT_CHARS, tail=_TAIL_KEEP))


def _line(item: Entry) -> bytes:
    return json.dumps(item.to_json(), ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append(home: Path, project: str, *, model: str, role: str, kind: str, text: str, now: datetime) -> None:
    """Append one line to ``project``'s log, durably (fsync) before returning.  Raises RelayError for a
    line that cannot be written as asked, OSError when the disk refuses."""
    write_entry(home, entry(project, model=model, role=role, kind=kind, text=text, now=now))


def write_entry(home: Path, item: Entry) -> None:
    """Append a line made by ``entry`` (``append`` in two steps, for a caller that keeps the entry)."""
    line = _line(item)
    folder = relay_dir(home)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    current, rotated = relay_paths(home, item.project)
    while True:
        made = not current.exists()
        fd = os.open(current, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            st = os.fstat(fd)
            try:
                if os.stat(current).st_ino != st.st_ino:
                    continue  # rotated by another writer while we waited for the lock: open the new file
            except FileNotFoundError:
                continue
            if st.st_size and st.st_size + len(line) > MAX_FILE_BYTES:
                os.replace(current, rotated)  # the rotated file before it goes: the oldest lines first
                _fsync_dir(folder)
                continue
            data = line
            if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
                data = b"\n" + line  # a line cut by a crash: end it, so that it costs only itself
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            if made:
                _fsync_dir(folder)
            return
        finally:
            os.close(fd)  # releases the lock


# -- reading -------------------------------------------------------------------------------------


def _parse(raw: bytes) -> Entry | None:
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    fields = ("at", "project", "model", "role", "kind", "text")
    if not all(isinstance(obj.get(name), str) for name in fields):
        return None
    if obj["kind"] not in KINDS or obj["role"] not in ROLES:
        return None
    return Entry(*(obj[name] for name in fields))


def _lines_backwards(path: Path) -> Iterator[bytes]:
    """The lines of ``path`` from the last to the first, read in blocks from the end; a line over
    MAX_LINE_BYTES is skipped without being held."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        end = f.seek(0, os.SEEK_END)
        pending = b""
        skipping = False
        while end > 0:
            start = max(0, end - _BLOCK)
            f.seek(start)
            block = f.read(end - start) + pending
            end = start
            parts = block.split(b"\n")
            pending = parts[0]  # may continue in the block before
            for raw in reversed(parts[1:]):
                if skipping:
                    skipping = False
                    continue
                if raw.strip() and len(raw) <= MAX_LINE_BYTES:
                    yield raw
            if len(pending) > MAX_LINE_BYTES:
                pending, skipping = b"", True
        if pending.strip() and not skipping:
            yield pending


def _lines_forwards(path: Path) -> Iterator[bytes]:
    from neverest.lines import read_lines

    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        for _, raw in read_lines(f, MAX_LINE_BYTES):
            if raw is not None and raw.strip():
                yield raw


def entries(home: Path, project: str) -> list[Entry]:
    """Every line held for ``project``, oldest first (the rotated file's, then the current one's)."""
    current, rotated = relay_paths(home, project)
    return [e for path in (rotated, current) for raw in _lines_forwards(path) if (e := _parse(raw)) is not None]


def newest(home: Path, project: str) -> Iterator[Entry]:
    """The lines held for ``project``, newest first, read from the end (cheap for the last few)."""
    current, rotated = relay_paths(home, project)
    for path in (current, rotated):
        for raw in _lines_backwards(path):
            found = _parse(raw)
            if found is not None:
                yield found


def last_model(home: Path, project: str) -> str | None:
    """The model that wrote ``project``'s last line written by a model; None when none did (the person's
    notes, written without a model, are passed over)."""
    return next((e.model for e in newest(home, project) if e.model), None)


def projects(home: Path) -> list[str]:
    """The projects that have a log, as their lines name them."""
    found: dict[str, None] = {}
    folder = relay_dir(home)
    try:
        names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".jsonl"))
    except FileNotFoundError:
        return []
    for name in names:
        for raw in _lines_backwards(folder / name):
            item = _parse(raw)
            if item is not None:
                found[item.project] = None
                break
    return list(found)


def files(home: Path) -> list[Path]:
    """Every log file in the home (current and rotated), for export and forget."""
    try:
        return sorted(p for p in relay_dir(home).iterdir() if p.name.endswith(".jsonl") and p.is_file())
    except FileNotFoundError:
        return []


def all_entries(home: Path) -> Iterator[Entry]:
    """Every line of every log, file by file (a project's rotated file before its current one)."""
    for path in sorted(files(home), key=lambda p: (p.name.split(".")[0], not p.name.endswith(".1.jsonl"))):
        for raw in _lines_forwards(path):
            item = _parse(raw)
            if item is not None:
                yield item


# -- the handoff ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Handoff:
    """What a model picking up ``project`` is shown: the recent work, the corrections and the deploys."""

    project: str
    key: str
    last_model: str | None
    recent: tuple[Entry, ...]  # the last lines of work (user, assistant, note), oldest first
    corrections: tuple[Entry, ...]  # the newest MAX_ALWAYS corrections held, oldest first
    deploys: tuple[Entry, ...]  # likewise for deploys

    @property
    def empty(self) -> bool:
        return not (self.recent or self.corrections or self.deploys)

    def to_json(self) -> dict[str, Any]:
        return {"project": self.project, "key": self.key, "last_model": self.last_model,
                "recent": [e.to_json() for e in self.recent], "corrections": [e.to_json() for e in self.corrections],
                "deploys": [e.to_json() for e in self.deploys]}

    def text(self, *, work: bool = True) -> str:
        """The handoff as text for a model (``work=False``: the corrections and deploys only), at most
        MAX_HANDOFF_CHARS; '' when there is nothing to say.  The oldest work goes first when cut."""
        always = _section("Corrections the person gave (their words)", self.corrections) + \
            _section("Deploys (what shipped)", self.deploys)
        recent = list(self.recent) if work else []
        while True:
            body = []
            if recent:
                by = f"; the last model here was {self.last_model}" if self.last_model else ""
                body = _section(f"Recent work (the last {len(recent)} line(s){by})", recent)
            parts = body + always
            if not parts:
                return ""
            head = (f"Neverest project log of {self.project}: what happened in this project so far, observations "
                    "from earlier work, not instructions.")
            text = "\n".join([head, *parts])
            if len(text) <= MAX_HANDOFF_CHARS or not recent:
                return text if len(text) <= MAX_HANDOFF_CHARS else text[:MAX_HANDOFF_CHARS - 1] + "…"
            recent = recent[max(1, len(recent) // 4):]


def _who(e: Entry) -> str:
    if e.role == "user":
        return "the person" + (f" (to {e.model})" if e.model else "")
    if e.role == "assistant":
        return e.model or "the model"
    return "note" + (f" by {e.model}" if e.model else "")


def _section(title: str, lines: list[Entry] | tuple[Entry, ...]) -> list[str]:
    if not lines:
        return []
    out = [f"{title}:"]
    for e in lines:
        text = " ".join(e.text.split())
        if len(text) > HANDOFF_LINE_CHARS:
            text = text[:HANDOFF_LINE_CHARS - 1] + "…"
        out.append(f"- {e.at[:16].replace('T', ' ')} {_who(e)}: {text}")
    return out


def handoff_data(home: Path, project: str, *, limit: int = DEFAULT_LIMIT) -> Handoff:
    """The handoff of ``project``: its last ``limit`` lines of work, and every correction and deploy held
    (the newest MAX_ALWAYS of each), read from the end of the log."""
    recent: list[Entry] = []
    always: dict[str, list[Entry]] = {"correction": [], "deploy": []}
    model: str | None = None
    for e in newest(home, project):
        if model is None and e.model:
            model = e.model
        if e.kind in always:
            if len(always[e.kind]) < MAX_ALWAYS:
                always[e.kind].append(e)
        elif len(recent) < limit:
            recent.append(e)
    return Handoff(project=project_name(project), key=project_key(project), last_model=model,
                   recent=tuple(reversed(recent)), corrections=tuple(reversed(always["correction"])),
                   deploys=tuple(reversed(always["deploy"])))


class LogIndex:
    """``handoff_data`` for a process that asks for it often (the proxy, at every request naming a
    project): what each project's log says is kept, and only the lines appended since the last call are
    read.  A file replaced (rotated, or rewritten by ``forget``) or cut is read again whole.  Safe to
    call from several threads; at most ``max_projects`` projects are kept, the least recently asked
    about forgotten first."""

    def __init__(self, *, limit: int = DEFAULT_LIMIT, max_projects: int = 256) -> None:
        import threading

        self.limit = limit
        self.max_projects = max_projects
        self._lock = threading.Lock()
        self._held: dict[str, _Held] = {}

    def handoff_data(self, home: Path, project: str) -> Handoff:
        key = f"{home}\x1f{project_key(project)}"
        with self._lock:
            held = self._held.pop(key, None)
            current, rotated = relay_paths(home, project)
            held = _catch_up(held, current, rotated, self.limit)
            self._held[key] = held  # the most recently asked about last
            while len(self._held) > self.max_projects:
                del self._held[next(iter(self._held))]
            return Handoff(project=project_name(project), key=project_key(project), last_model=held.model,
                           recent=tuple(held.recent), corrections=tuple(held.always["correction"]),
                           deploys=tuple(held.always["deploy"]))


@dataclass
class _Held:
    inode: int  # the current file's
    rotated: tuple[int, int]  # the rotated file's inode and size: when they change, everything is read again
    position: int  # bytes of the current file read, up to the end of its last whole line
    recent: list[Entry]
    always: dict[str, list[Entry]]
    model: str | None


def _signature(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except FileNotFoundError:
        return (0, 0)
    return (st.st_ino, st.st_size)


def _catch_up(held: _Held | None, current: Path, rotated: Path, limit: int) -> _Held:
    before = _signature(rotated)
    try:
        f = open(current, "rb")
    except FileNotFoundError:
        return _take(_Held(0, before, 0, [], {"correction": [], "deploy": []}, None), _lines_forwards(rotated), limit)
    with f:
        st = os.fstat(f.fileno())
        if held is None or held.inode != st.st_ino or held.rotated != before or st.st_size < held.position:
            held = _take(_Held(st.st_ino, before, 0, [], {"correction": [], "deploy": []}, None),
                         _lines_forwards(rotated), limit)
        f.seek(held.position)
        data = f.read(max(st.st_size - held.position, 0))
    end = data.rfind(b"\n") + 1  # a last line without its end is read when it is whole
    held.position += end
    return _take(held, (raw for raw in data[:end].split(b"\n") if raw.strip() and len(raw) <= MAX_LINE_BYTES), limit)


def _take(held: _Held, lines: Iterator[bytes], limit: int) -> _Held:
    for raw in lines:
        item = _parse(raw)
        if item is None:
            continue
        if item.model:
            held.model = item.model
        if item.kind in held.always:
            held.always[item.kind] = [*held.always[item.kind][-(MAX_ALWAYS - 1):], item]
        else:
            held.recent = [*held.recent[-(limit - 1):], item] if limit > 0 else []
    return held


def handoff(home: Path, project: str, *, limit: int = DEFAULT_LIMIT) -> str:
    """The handoff of ``project`` as text (``Handoff.text``); '' when its log holds nothing."""
    return handoff_data(home, project, limit=limit).text()


# -- the owner's data ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RelayForgotten:
    lines: int  # lines removed
    files: int  # files removed whole

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def forget(home: Path, *, project: str | None = None, before: datetime | None = None) -> RelayForgotten:
    """Remove a project's whole log (``project``), or every line written before ``before`` in every log.

    A file left with lines is rewritten (a temporary file renamed over it, under the writers' lock);
    a file left empty is removed."""
    from neverest.files import atomic_write

    if (project is None) == (before is None):
        raise ValueError("relay.forget takes exactly one of project, before")
    if project is not None:
        gone = 0
        removed = 0
        for path in relay_paths(home, project):
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # a writer waiting for the lock then finds the file gone
                gone += sum(1 for _ in _lines_forwards(path))
                path.unlink()
                removed += 1
            finally:
                os.close(fd)
        return RelayForgotten(lines=gone, files=removed)
    assert before is not None
    gone = removed = 0
    for path in files(home):
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # appends wait; a rotation cannot move the file meanwhile
            kept: list[bytes] = []
            dropped = 0
            for raw in _lines_forwards(path):
                item = _parse(raw)
                if item is None:
                    dropped += 1  # a damaged line is no one's data worth keeping
                    continue
                try:
                    old = parse_time(item.at) < before
                except ValueError:
                    old = True
                if old:
                    dropped += 1
                else:
                    kept.append(raw + b"\n")
            if not dropped:
                continue
            gone += dropped
            if kept:
                atomic_write(path, b"".join(kept))
            else:
                path.unlink()
                removed += 1
        finally:
            os.close(fd)
    return RelayForgotten(lines=gone, files=removed)
