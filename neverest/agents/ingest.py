"""Transcript ingest: the agents' session files become episodes, incrementally and idempotently.

``ingest_transcripts`` walks the Claude Code projects folder and the Codex sessions folder,
and for each session file reads only what was appended since the last read:

- **Cursor**: per file, in the store's ``meta`` table: the inode, the byte offset read so
  far (always just past a complete line), the size and mtime seen, a hash of the file's
  first bytes (up to 1 KiB) and the detector's small state.  A file whose inode, size and
  mtime are unchanged is not read, so a second ingest with nothing new costs an open and
  an ``fstat`` per file (all cursors are loaded in one query).
- **Replaced or truncated**: another inode, fewer bytes than the offset, or other first
  bytes mean a new file: it is read again from 0 with a fresh state.
- **Nothing twice**: events go through ``Memory.ingest`` (the one ingest function) before
  the cursors that cover them are saved.  A run killed in between reads those lines again,
  and their events get the same deterministic episode ids, so they count as duplicates.
- **Bounded**: each line is capped at ``MAX_LINE_BYTES`` (a longer one is drained and
  counted as ``too_large``), a file is read ``STEP_LINES`` lines at a time, and events and
  cursors are committed every ``BATCH_EVENTS`` events or ``BATCH_FILES`` files.
- **Never fatal**: malformed lines, unknown line types, files that vanish or cannot be
  read are counted in the report, which ``--json`` prints: a format change shows there.

Raw transcript text only ever reaches the local store (episodes never leave this machine);
what can be published is the scrubbed lesson sentence a sleep writes, as for any episode.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from neverest.agents.detect import Detector
from neverest.agents.transcripts import CLAUDE_AGENT, CODEX_AGENT, Turn, merge, parse_line, read_complete_lines
from neverest.memory.queries import transcripts as queries
from neverest.memory.service import Memory

STEP_LINES: Final = 20_000
BATCH_EVENTS: Final = 1000
BATCH_FILES: Final = 500
PREFIX_BYTES: Final = 1024
MAX_REFUSALS_SHOWN: Final = 20


def default_claude_dir() -> Path:
    return Path.home() / ".claude" / "projects"


def default_codex_dir() -> Path:
    codex_home = os.environ.get("CODEX_HOME")
    return (Path(codex_home) if codex_home else Path.home() / ".codex") / "sessions"


@dataclass
class IngestReport:
    """What one ingest did; ``lines`` counts what was read and why some were skipped."""

    files: int = 0        # session files found
    read: int = 0         # files with something new read
    reread: int = 0       # files replaced or truncated since the last read, read again from 0
    vanished: int = 0     # files gone between the listing and the read
    unreadable: list[str] = field(default_factory=list)
    bytes: int = 0
    turns: int = 0
    lines: Counter[str] = field(default_factory=Counter)
    detected: Counter[str] = field(default_factory=Counter)
    stored: int = 0
    duplicates: int = 0   # held before this run (a file read again from the start)
    repeats: int = 0      # an event met earlier in this run: the same one again in its session, or an
    #                       error again with what worked (it fills the episode in)
    refused: int = 0
    refusals: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"files": self.files, "read": self.read, "reread": self.reread, "vanished": self.vanished,
                "unreadable": self.unreadable, "bytes": self.bytes, "turns": self.turns,
                "lines": dict(sorted(self.lines.items())), "detected": dict(sorted(self.detected.items())),
                "stored": self.stored, "duplicates": self.duplicates, "repeats": self.repeats,
                "refused": self.refused,
                "refusals": self.refusals}


@dataclass
class _Cursor:
    ino: int = 0
    offset: int = 0
    size: int = -1
    mtime_ns: int = -1
    prefix: str = ""
    state: dict[str, Any] = field(default_factory=dict)

    def to_meta(self) -> str:
        return json.dumps({"ino": self.ino, "offset": self.offset, "size": self.size, "mtime_ns": self.mtime_ns,
                           "prefix": self.prefix, "state": self.state}, separators=(",", ":"))

    @classmethod
    def from_meta(cls, value: str | None) -> _Cursor:
        if value is None:
            return cls()
        try:
            obj = json.loads(value)
            state = obj.get("state")
            return cls(ino=int(obj["ino"]), offset=int(obj["offset"]), size=int(obj["size"]),
                       mtime_ns=int(obj["mtime_ns"]), prefix=str(obj["prefix"]),
                       state=state if isinstance(state, dict) else {})
        except (ValueError, TypeError, KeyError, AttributeError):
            # A cursor mangled by hand: reading the file again only yields duplicates.
            return cls()


def _prefix(fd: int, length: int) -> str:
    return hashlib.blake2b(os.pread(fd, length, 0), digest_size=16).hexdigest() if length else ""


def session_files(root: Path, agent: str) -> Iterator[Path]:
    """The session files under ``root`` (sorted, symlinks not followed); nothing when it is absent."""
    if not root.is_dir():
        return
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            if name.endswith(".jsonl") and (agent == CLAUDE_AGENT or name.startswith("rollout-")):
                yield Path(folder) / name


class _Run:
    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.report = IngestReport()
        self.events: list[dict[str, Any]] = []
        # The ids of the events of this run: one set across the flushes, so that an event met again
        # later in the run is a repeat, not "already held" (a few dozen bytes per event detected).
        self.seen: set[str] = set()
        self.cursors: dict[str, str] = {}
        self.known = queries.cursors(memory.store.db)

    def flush(self) -> None:
        if self.events:
            result = self.memory.ingest(self.events, seen=self.seen)
            self.report.stored += result.stored
            self.report.duplicates += result.duplicates
            self.report.repeats += result.repeats
            self.report.refused += len(result.refused)
            room = MAX_REFUSALS_SHOWN - len(self.report.refusals)
            self.report.refusals.extend(reason for _, reason in result.refused[:max(room, 0)])
            self.events = []
        if self.cursors:  # only once the events they cover are committed
            with self.memory.store.write() as db:
                queries.save_cursors(db, self.cursors)
            self.cursors = {}

    def file(self, path: Path, agent: str) -> None:
        key = os.fspath(path)
        cursor = _Cursor.from_meta(self.known.get(key))
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                if st.st_ino == cursor.ino and st.st_size == cursor.size and st.st_mtime_ns == cursor.mtime_ns:
                    return  # nothing new: not a byte read
                if (st.st_ino != cursor.ino or st.st_size < cursor.offset
                        or _prefix(f.fileno(), min(cursor.offset, PREFIX_BYTES)) != cursor.prefix):
                    if cursor.ino:
                        self.report.reread += 1
                    cursor = _Cursor(ino=st.st_ino)
                self.report.read += 1
                while True:
                    more = self._step(f, path, agent, cursor)
                    # Size and mtime say "read to the end" only once it is: a run stopped after
                    # a middle step must not take the rest of the file for already read.
                    cursor.size, cursor.mtime_ns = (-1, -1) if more else (st.st_size, st.st_mtime_ns)
                    cursor.prefix = _prefix(f.fileno(), min(cursor.offset, PREFIX_BYTES))
                    self.cursors[key] = cursor.to_meta()
                    if len(self.events) >= BATCH_EVENTS or len(self.cursors) >= BATCH_FILES:
                        self.flush()
                    if not more:
                        return
                    st = os.fstat(f.fileno())
        except FileNotFoundError:
            self.report.vanished += 1
        except OSError as exc:
            self.report.unreadable.append(f"{path}: {exc.strerror or exc}")

    def _step(self, f: Any, path: Path, agent: str, cursor: _Cursor) -> bool:
        """Read up to STEP_LINES complete lines after the cursor; True when there may be more."""
        report = self.report
        detector = Detector(agent, cursor.state, session=path.stem)
        previous: Turn | None = None
        count = 0
        start = cursor.offset
        for end, raw in read_complete_lines(f, cursor.offset, STEP_LINES):
            count += 1
            cursor.offset = end
            if raw is None:
                report.lines["too_large"] += 1
                continue
            if not raw.strip():
                report.lines["blank"] += 1
                continue
            info = parse_line(raw, agent)
            if info.session or info.cwd:
                detector.saw(info.session, info.cwd)
            if info.exit_code is not None:
                detector.exit_code(*info.exit_code)
            if info.skipped or info.turn is None:
                report.lines[info.skipped or "used"] += 1
                continue
            report.lines["used"] += 1
            if merge(previous, info.turn):
                continue
            if previous is not None:
                self._turn(detector, previous)
            previous = info.turn
        if previous is not None:
            self._turn(detector, previous)
        report.bytes += cursor.offset - start
        cursor.state = detector.state()
        return count >= STEP_LINES

    def _turn(self, detector: Detector, turn: Turn) -> None:
        self.report.turns += 1
        for event in detector.turn(turn):
            # An error sent again with what worked fills in the stored one: counted as a fix.
            self.report.detected["worked" if "worked" in event else event["kind"]] += 1
            self.events.append(event)

    def forget_missing(self, roots: list[Path], seen: set[str]) -> None:
        """Cursors of files that are gone from a scanned folder: nothing will read them again."""
        gone = [key for key in self.known if key not in seen
                and any(key.startswith(os.fspath(root) + os.sep) for root in roots)]
        if gone:
            with self.memory.store.write() as db:
                queries.drop_cursors(db, gone)


def ingest_transcripts(memory: Memory, *, claude: Path | None, codex: Path | None) -> IngestReport:
    """Ingest what is new in the Claude Code (``claude``) and Codex (``codex``) session folders;
    None skips a kind.  Safe to run at any time, from any process: see the module docstring."""
    run = _Run(memory)
    seen: set[str] = set()
    roots: list[Path] = []
    for root, agent in ((claude, CLAUDE_AGENT), (codex, CODEX_AGENT)):
        if root is None:
            continue
        root = root.expanduser().absolute()
        if root.is_dir():
            roots.append(root)
        for path in session_files(root, agent):
            run.report.files += 1
            seen.add(os.fspath(path))
            run.file(path, agent)
    run.flush()
    run.forget_missing(roots, seen)
    return run.report
