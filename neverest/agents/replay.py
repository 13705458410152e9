"""``neverestctl replay``: would the memory have given the right lesson at the right moment?

Session files are replayed in time order into a throwaway memory (a temporary home, never the one
in ``NEVEREST_HOME``), sleeping at the end of each day.  Within a session every prompt and tool
call is handed, in order, to the code the Claude Code hook runs (``hook.lessons_for``, holdout off),
and the session's events are read by the same detector ``neverestctl ingest`` uses.  Then:

- a **repeat** is an error or correction whose gist joins a lesson this memory had learned before
  the session began (the consolidation's own test: for an error the same mistake,
  ``phrasing.error_signature``, and for both cosine with the lesson's centroid at or above the join
  threshold, in the memory's space, below); an error sent again with what worked is not a second repeat;
- it is **caught** when that lesson was given earlier in the session (before the repeat), else
  **missed**;
- an **injection** is a lesson given at some moment; it is **unused** when nothing later in the
  session repeats it.

The **baseline** walks the same moments with a retrieve-similar memory: the 3 episodes most similar
to the moment's query (cosine ≥ recall's floor, each at most once a session), no lessons.  Its
injection catches a repeat when the episode it gave joins the repeat (the same test), and is unused
when nothing later in the session does.

Only what the hook would see is used: the person's prompts, the tool calls (name and command) and
the session's working directory.  Sessions without timestamps are skipped and counted.  Replay cannot
credit prevention: the replayed agent acts as it did, so a lesson that would have kept a mistake from
recurring counts as unused.

**Spaces.**  The throwaway memory runs in the hashed space unless ``config`` names an embedding model
(``embed_url`` and ``embed_model``: ``neverestctl replay --embed-url URL --embed-model NAME``; the home's
own configuration is not used, so the figures do not depend on whose machine runs it).  With a model, every
vector comparison is made in the model's space, the one the memory runs in: the nights embed the episodes
and lessons there and consolidate with its join threshold; the repeat test, the baseline's similar
episodes (at recall's floor in that space) and the hook's matching of prompts (through the hook's own model
client, ``hook_model.py``, with a long time limit, so that a busy machine does not change the figures) use
it too.  A model that does not answer at the start leaves the whole replay in the hashed space, and the
report says which space it ran in; one that stops answering midway ends the replay with an error (its
figures would mix two spaces).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

import numpy as np

from neverest.agents import hook
from neverest.agents.detect import Detector
from neverest.agents.hook_model import ModelQuery
from neverest.agents.ingest import session_files
from neverest.agents.transcripts import CLAUDE_AGENT, CODEX_AGENT, Turn, merge, parse_line, read_complete_lines
from neverest.clock import FixedClock, parse_time
from neverest.config import Config
from neverest.memory.embed import HASHED_SPACE, Embedder, HashedEmbedder, ModelEmbedder, from_blob, join_threshold
from neverest.memory.events import EventError, parse_event
from neverest.memory.model import Endpoint
from neverest.memory.phrasing import error_signature
from neverest.memory.queries import embeddings as embedding_queries
from neverest.memory.queries import episodes as episode_queries
from neverest.memory.queries import injections as q
from neverest.memory.queries import lessons as lesson_queries
from neverest.memory.recall import catch_up, relevance_floor
from neverest.memory.service import Memory

BASELINE_TOP: Final = 3
REPEAT_KINDS: Final = ("error", "correction")
_MAX_LINES: Final = 1_000_000
_FAR: Final = 1e12  # no deadline: the replay is not the agent's hook call
# A replay sends the model every text of the corpus: a small model on a CPU takes seconds for a batch of
# long ones (all-MiniLM-L6-v2 in numpy: about 0.4 s a text of 256 word pieces here), so batches are small and
# the waits long.  The hook's model client is given as long (the hook itself: hook_model.TIMEOUT_S).
_MODEL_BATCH: Final = 16
_MODEL_TIMEOUT_S: Final = 120.0


@dataclass
class Moment:
    """A point where the hook is asked (``event`` set) or where the session says something (``found``)."""

    seq: int
    at: datetime
    event: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    found: dict[str, Any] | None = None


@dataclass
class Session:
    agent: str
    path: Path
    session: str = ""
    cwd: str = ""
    moments: list[Moment] = field(default_factory=list)

    @property
    def start(self) -> datetime:
        return self.moments[0].at


@dataclass
class Tally:
    caught: int = 0
    missed: int = 0
    injections: int = 0
    unused: int = 0

    def to_json(self) -> dict[str, int]:
        return {"caught": self.caught, "missed": self.missed, "injections": self.injections, "unused": self.unused}


@dataclass
class ReplayReport:
    space: str = HASHED_SPACE  # the space the memory ran in
    # The spaces the throwaway memory's vectors were in at the end: {"episodes": {space: rows}, "lessons": ...}.
    stored: dict[str, dict[str, int]] = field(default_factory=dict)
    learned: list[str] = field(default_factory=list)  # "kind: text" of every lesson learned, strongest first
    files: int = 0
    sessions: int = 0
    skipped: int = 0  # files with no timestamp or no turn
    days: int = 0
    lessons: int = 0
    repeats: int = 0
    memory: Tally = field(default_factory=Tally)
    baseline: Tally = field(default_factory=Tally)
    examples: list[dict[str, str]] = field(default_factory=list)
    # Every repeat and every injection, for ``--explain``: what it was, and what became of it.
    details: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"space": self.space, "stored": self.stored, "files": self.files, "sessions": self.sessions,
                "skipped": self.skipped, "days": self.days, "lessons": self.lessons, "repeats": self.repeats,
                **self.memory.to_json(), "baseline": self.baseline.to_json(), "examples": self.examples,
                "learned": self.learned}

    def explained(self) -> str:
        """Each repeat (caught or missed) and each injection (used or unused), a line each."""
        out = []
        for d in self.details:
            if "repeat" in d:
                mark = "caught" if d["caught"] == "yes" else "MISSED"
                out.append(f"{mark}  {d['repeat']}\n        lesson: {d['lesson']}")
            else:
                mark = "used  " if d["used"] == "yes" else "UNUSED"
                out.append(f"{mark}  {d['given']}\n        lesson: {d['lesson']}")
        return "\n".join(out)


def _time(value: str | None, fallback: datetime | None) -> datetime | None:
    if not value:
        return fallback
    try:
        return parse_time(value)
    except (ValueError, OverflowError):
        return fallback


def read_session(path: Path, agent: str) -> Session | None:
    """One session file as moments in order; None when it holds no dated turn."""
    out = Session(agent, path)
    detector = Detector(agent, session=path.stem)
    seq = 0
    last: datetime | None = None
    previous: Turn | None = None

    def add(turn: Turn) -> None:
        nonlocal seq, last
        at = _time(turn.at, last)
        if at is None:
            return
        last = at
        if turn.role == "assistant":
            for call in turn.calls:
                tool_input = {"command": call.command if isinstance(call.command, str) else " ".join(call.command)} \
                    if call.command else {}
                out.moments.append(Moment(seq, at, "PreToolUse", {"tool_name": call.name, "tool_input": tool_input}))
                seq += 1
        for event in detector.turn(turn):
            out.moments.append(Moment(seq, at, found=event))
            seq += 1
        if turn.role == "user" and turn.text.strip() and not turn.results:
            out.moments.append(Moment(seq, at, "UserPromptSubmit", {"prompt": turn.text}))
            seq += 1

    with open(path, "rb") as stream:
        for _, raw in read_complete_lines(stream, 0, _MAX_LINES):
            if raw is None or not raw.strip():
                continue
            info = parse_line(raw, agent)
            detector.saw(info.session, info.cwd)
            if info.exit_code is not None:
                detector.exit_code(*info.exit_code)
            if info.turn is None:
                continue
            if merge(previous, info.turn):
                continue
            if previous is not None:
                add(previous)
            previous = info.turn
    if previous is not None:
        add(previous)
    if not out.moments:
        return None
    out.session = detector.session or path.stem
    out.cwd = detector.cwd
    out.moments.insert(0, Moment(-1, out.moments[0].at, "SessionStart", {"source": "startup"}))
    return out


def sessions_in(claude: Path | None, codex: Path | None) -> tuple[list[Session], int, int]:
    """The dated sessions under the folders, oldest first; with the number of files and of skipped ones."""
    found: list[Session] = []
    files = skipped = 0
    for root, agent in ((claude, CLAUDE_AGENT), (codex, CODEX_AGENT)):
        if root is None:
            continue
        for path in session_files(root.expanduser(), agent):
            files += 1
            session = read_session(path, agent)
            if session is None:
                skipped += 1
            else:
                found.append(session)
    found.sort(key=lambda s: (s.start, str(s.path)))
    return found, files, skipped


@dataclass
class _Lesson:
    hash: str
    kind: str
    text: str
    centroid: np.ndarray
    signature: str  # for an error lesson, the mistake it is about (phrasing.error_signature)


def _own_lessons(memory: Memory, space: str) -> list[_Lesson]:
    signatures = {key: error_signature(title, happened)
                  for key, title, happened in episode_queries.error_fields(memory.store.db) if isinstance(key, int)}
    return [_Lesson(digest, kind, text, from_blob(blob), signatures.get(lesson_id, ""))
            for lesson_id, digest, kind, text, blob in lesson_queries.own_hashed_centroids(memory.store.db, space)]


def _gist_of(event: dict[str, Any], now: datetime) -> tuple[str, str] | None:
    """The event's kind and gist, as the store would hold them."""
    try:
        parsed = parse_event(event, now=now + timedelta(days=1))
    except EventError:
        return None
    return parsed.kind, parsed.gist


class Replay:
    def __init__(self, memory: Memory, home: Path, clock: FixedClock, report: ReplayReport, space: str,
                 model: ModelQuery | None = None) -> None:
        """``space``: the one the memory runs in (its embedder's); ``model``: the hook's model client for it."""
        self.memory, self.home, self.clock, self.report = memory, home, clock, report
        self.space, self.model = space, model
        self.threshold = join_threshold(space)
        self.floor = relevance_floor(space)
        self.embedder: Embedder = memory.embedder
        # The lessons only change at night: read once after each (``slept``), not once a session.
        self._lessons: list[_Lesson] | None = None

    def slept(self) -> None:
        self._lessons = None

    def _episodes(self) -> tuple[list[str], list[str], np.ndarray]:
        if self.space != HASHED_SPACE:
            # The day's episodes were stored with hashed vectors: into the model's space, as recall does.
            catch_up(self.memory.store, self.embedder)
        rows = episode_queries.vectors(self.memory.store.db, self.space)
        if not rows:
            return [], [], np.zeros((0, 1), dtype=np.float32)
        return ([str(r[0]) for r in rows], [str(r[1]) for r in rows],
                np.stack([from_blob(r[2]) for r in rows]))

    def _embed(self, texts: list[str]) -> np.ndarray:
        """The texts' vectors in the replay's space (a model that fails mid-replay is an error: the
        figures would mix two spaces)."""
        if not texts:
            return np.zeros((0, 1), dtype=np.float32)
        space, vectors = self.embedder.embed_with_space(texts)
        if space != self.space:
            raise RuntimeError(f"the embedding model stopped answering during the replay: {self.embedder.last_error}")
        return vectors

    def session(self, s: Session) -> None:
        if self._lessons is None:
            self._lessons = _own_lessons(self.memory, self.space)
        lessons = self._lessons
        by_kind = {kind: [lesson for lesson in lessons if lesson.kind == kind] for kind in REPEAT_KINDS}
        ids, kinds, matrix = self._episodes()
        # Every text of the session the replay compares, embedded at once (one request a batch with a model).
        found_gists = {m.seq: _gist_of(m.found, m.at) for m in s.moments if m.found is not None}
        queries = {m.seq: _query(m.event, m.payload | {"hook_event_name": m.event}) for m in s.moments
                   if m.found is None}
        compared = [g[1] for g in found_gists.values() if g is not None] + [t for t in queries.values() if t]
        embedded = dict(zip(compared, self._embed(compared), strict=True))
        given: list[tuple[int, str]] = []  # (seq, lesson hash)
        base_given: list[tuple[int, int]] = []  # (seq, episode row index)
        base_seen: set[int] = set()
        repeats: list[tuple[int, str, np.ndarray, str]] = []  # (seq, lesson hash, vector, kind)
        events: list[dict[str, Any]] = []
        gists: dict[int, str] = {}
        moments: dict[int, str] = {}
        for moment in s.moments:
            self.clock.set(moment.at)
            if moment.found is not None:
                events.append(moment.found)
                if "worked" in moment.found:
                    continue  # the same error sent again with what worked: not a second repeat
                gist = found_gists[moment.seq]
                if gist is None or gist[0] not in REPEAT_KINDS:
                    continue
                kind, vector = gist[0], embedded[gist[1]]
                # The consolidation's own test: the same mistake (for an error), and close in meaning.
                signature = error_signature(str(moment.found.get("title", "")), str(moment.found.get("happened", ""))) \
                    if kind == "error" else ""
                candidates = [c for c in by_kind.get(kind, []) if c.signature == signature]
                if not candidates:
                    continue
                scores = [float(lesson.centroid @ vector) for lesson in candidates]
                best = int(np.argmax(scores))
                if scores[best] >= self.threshold:
                    repeats.append((moment.seq, candidates[best].hash, vector, kind))
                    gists[moment.seq] = _gist(moment.found)
                continue
            payload = moment.payload | {"hook_event_name": moment.event, "session_id": s.session, "cwd": s.cwd}
            before = q.already_given(self.memory.store.db, s.session)
            hook.lessons_for(self.memory.store, self.home, payload, moment.event, s.session, 0.0,
                             moment.at, _FAR, model=self.model)
            for digest in sorted(q.already_given(self.memory.store.db, s.session) - before):
                given.append((moment.seq, digest))
                moments[moment.seq] = f"{moment.event}: {_query(moment.event, payload)[:120]}"
            query = queries[moment.seq]
            if query and len(ids):
                scores = matrix @ embedded[query]
                order = [int(i) for i in np.argsort(-scores) if scores[int(i)] >= self.floor
                         and int(i) not in base_seen][:BASELINE_TOP]
                for i in order:
                    base_seen.add(i)
                    base_given.append((moment.seq, i))
        self._tally(s, given, base_given, repeats, kinds, matrix, lessons)
        texts = {lesson.hash: lesson.text for lesson in lessons}
        for seq, digest, _, _ in repeats:
            caught = any(at < seq and d == digest for at, d in given)
            self.report.details.append({"session": s.session, "repeat": gists.get(seq, ""),
                                        "lesson": texts.get(digest, digest), "caught": "yes" if caught else "no"})
        for at, digest in given:
            used = any(r[0] > at and r[1] == digest for r in repeats)
            self.report.details.append({"session": s.session, "given": moments.get(at, ""),
                                        "lesson": texts.get(digest, digest), "used": "yes" if used else "no"})
        self.memory.ingest(events)

    def _tally(self, s: Session, given: list[tuple[int, str]], base_given: list[tuple[int, int]],
               repeats: list[tuple[int, str, np.ndarray, str]], kinds: list[str], matrix: np.ndarray,
               lessons: list[_Lesson]) -> None:
        report = self.report
        report.repeats += len(repeats)
        texts = {lesson.hash: lesson.text for lesson in lessons}
        for seq, digest, vector, kind in repeats:
            if any(at < seq and d == digest for at, d in given):
                report.memory.caught += 1
                if len(report.examples) < 20:
                    report.examples.append({"session": s.session, "caught": texts.get(digest, digest)})
            else:
                report.memory.missed += 1
            if any(at < seq and kinds[i] == kind and float(matrix[i] @ vector) >= self.threshold
                   for at, i in base_given):
                report.baseline.caught += 1
            else:
                report.baseline.missed += 1
        report.memory.injections += len(given)
        report.memory.unused += sum(1 for at, d in given if not any(r[0] > at and r[1] == d for r in repeats))
        report.baseline.injections += len(base_given)
        report.baseline.unused += sum(
            1 for at, i in base_given
            if not any(r[0] > at and r[3] == kinds[i] and float(matrix[i] @ r[2]) >= self.threshold
                       for r in repeats))


def _gist(event: dict[str, Any]) -> str:
    parts = [str(event.get(name, "")) for name in ("title", "said", "happened") if event.get(name)]
    return ": ".join(parts)[:160]


def _query(event: str, payload: dict[str, Any]) -> str:
    if event == "UserPromptSubmit":
        return str(payload.get("prompt", ""))[:hook.MAX_QUERY_CHARS]
    if event == "PreToolUse":
        return hook.tool_query(payload)
    return ""


def _nights(start: datetime, end: datetime) -> Iterator[datetime]:
    """The 03:00 of each day after ``start``'s, up to ``end``."""
    night = start.replace(hour=3, minute=0, second=0, microsecond=0) + timedelta(days=1)
    while night <= end:
        yield night
        night += timedelta(days=1)


def replay(claude: Path | None, codex: Path | None, *, config: Config | None = None,
           hook_model: bool = True) -> ReplayReport:
    """``hook_model=False``: the hook matches prompts in the hashed space even when the memory runs in a model's
    (what the hook did before it could ask the model), for measuring what the model's space gives it."""
    sessions, files, skipped = sessions_in(claude, codex)
    report = ReplayReport(files=files, sessions=len(sessions), skipped=skipped)
    if not sessions:
        return report
    config = config or Config()
    with tempfile.TemporaryDirectory(prefix="neverest-replay-") as tmp:
        home = Path(tmp)
        home.chmod(0o700)
        clock = FixedClock(sessions[0].start)
        embedder = _embedder(config)
        with embedder_closed(embedder), Memory.open(home, config, clock, embedder=embedder) as memory:
            # One request decides the space of the whole run (embed.py: a model that fails is latched out).
            report.space = memory.embedder.probe()
            model = ModelQuery(config.embed_url, config.embed_model, timeout_s=_MODEL_TIMEOUT_S) \
                if report.space != HASHED_SPACE and hook_model else None
            run = Replay(memory, home, clock, report, report.space, model)
            last = sessions[0].start
            for s in sessions:
                for night in _nights(last, s.start):
                    clock.set(night)
                    memory.night()
                    run.slept()
                    report.days += 1
                run.session(s)
                last = max(last, s.moments[-1].at)
            # Every lesson learned on the way, the ones that decayed since included.
            report.lessons = lesson_queries.own_count(memory.store.db)
            report.stored = {table: embedding_queries.spaces(memory.store.db, table)
                             for table in ("episodes", "lessons")}
            report.learned = [f"{r.kind}: {r.text}" for r in lesson_queries.rows(memory.store.db, include_archived=True)
                              if r.origin == ""]
    return report


def _embedder(config: Config) -> Embedder:
    if not (config.embed_url and config.embed_model):
        return HashedEmbedder()
    endpoint = Endpoint(config.embed_url, config.embed_model, read_timeout_s=_MODEL_TIMEOUT_S,
                        total_timeout_s=_MODEL_TIMEOUT_S)
    return ModelEmbedder(endpoint, batch_size=_MODEL_BATCH)


@contextmanager
def embedder_closed(embedder: Embedder) -> Iterator[None]:
    try:
        yield
    finally:
        embedder.close()


def table(report: ReplayReport) -> str:
    rows = [("", "memory", "baseline"),
            ("caught", str(report.memory.caught), str(report.baseline.caught)),
            ("missed", str(report.memory.missed), str(report.baseline.missed)),
            ("injections", str(report.memory.injections), str(report.baseline.injections)),
            ("unused", str(report.memory.unused), str(report.baseline.unused))]
    width = max(len(r[0]) for r in rows)
    lines = [f"{report.sessions} sessions ({report.skipped} skipped) over {report.days} nights in the "
             f"{report.space} space; {report.lessons} lessons learned; {report.repeats} repeats of a mistake a "
             "lesson was about"]
    lines += [f"{name:<{width}}  {a:>8}  {b:>8}" for name, a, b in rows]
    return "\n".join(lines)


__all__ = ["ReplayReport", "replay", "table"]
