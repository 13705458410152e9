"""Sleep: the passes that turn episodes into lessons, in order (docs/reference.md, "Sleep: episodes become lessons").

1. embed        every episode, lesson and open prediction not yet in the current space
2. decay        strength × 2^(−days/45) for the whole days since decay last ran (each day
                counted once however often sleep runs); below 0.15 → archived
3. consolidate  each new episode joins the lesson of its kind whose sources it resembles
                (mean cosine ≥ 0.55 hashed, 0.62 in a model's space), or waits for a
                repeat: one correction makes a lesson, an error or stated surprise must
                occur twice, environment episodes and notes never consolidate; a
                correction objecting to a command joins the lesson that holds objections
                to it (``phrasing.objection_head``), whatever its cosine
4. merge        lessons of one kind whose sources mean the same (average linkage ≥ the
                same threshold), or corrections objecting to one command, become one
                theme; the others become its aliases
5. verify       open predictions come true when an episode of the lesson's kind happens
                after they were made at cosine ≥ 0.5; a received lesson's is *refuted* when
                its situation arose here and it did not hold (``refutation``); the first of
                the two decides; else they fail after 14 days
6. predict      one open prediction per lesson with strength ≥ 1

Models are called before writing, never inside a write transaction: a slow model
must not hold the store's write lock (a daemon's receive, a CLI's remember wait for
it).  Each pass decides and phrases first, then commits what it decided.

Each pass commits its own transactions, and every pass is idempotent, so a sleep
killed at any point leaves a consistent store and the next sleep completes the
work.  Consolidation looks only at pending (new) episodes and merging only at the
lessons that changed, so a sleep after 100 new episodes does work in proportion
to the 100, not to the size of the store.

The strength steps (a join +0.5, a confirmation +0.5, a failure −0.5, cap 5) are
this implementation's choice; the thresholds come from the sources.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from neverest.clock import iso, parse_time
from neverest.config import Config, SleepSection
from neverest.memory.embed import (
    VERIFY_COSINE,
    Embedder,
    VectorRows,
    from_blob,
    hashed_vector,
    join_threshold,
    to_blob,
)
from neverest.memory.model import Writer
from neverest.memory.phrasing import (
    claim_of,
    command_head,
    error_signature,
    lesson_gate,
    objection_head,
    observation,
    shell_head,
    what_failures_share,
)
from neverest.memory.queries import embeddings, episodes, lessons, predictions, sleeps
from neverest.memory.queries.embeddings import Table
from neverest.memory.scrub import meaningful, scrub
from neverest.memory.store import Store
from neverest.records import lesson_hash

Vector = npt.NDArray[np.float32]
CONSOLIDATING_KINDS = ("correction", "error", "surprise")
_BATCH = 500
_Write = Callable[[sqlite3.Connection], None]


@dataclass
class SleepReport:
    started: str
    finished: str = ""
    space: str = ""
    embedded: int = 0
    decay_days: int = 0
    archived_episodes: int = 0
    archived_lessons: int = 0
    considered: int = 0
    learned: list[dict[str, Any]] = field(default_factory=list)
    joined: int = 0
    waiting: int = 0
    unphrased: int = 0
    # Corrections by how the person reacted and the kind of action ("acted, stopped": {"Bash: rm": 2}):
    # the seed's delegation counts, for the owner's morning report only.
    delegation: dict[str, dict[str, int]] = field(default_factory=dict)
    merged: list[dict[str, Any]] = field(default_factory=list)
    confirmed: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    refuted: list[dict[str, Any]] = field(default_factory=list)  # received lessons that did not hold here
    predicted: int = 0
    signed_confirmations: int = 0  # filled by the caller that holds the key (service.py)
    signed_refutations: int = 0
    signed_lessons: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_DELEGATION: Final = {"rejected": "acted, stopped", "interrupted": "acted, stopped",
                      "told to act": "asked, told to act"}


def _program(row: episodes.Pending) -> str:
    head = shell_head(row.agent_did) if row.agent_did else command_head(row.title)
    return head.split(" ", 1)[0]


def delegation_kind(reaction: str) -> str:
    """The seed's delegation count a correction falls in: the agent acted and was stopped (a refused
    call, an interrupt), asked and was told to act, or was corrected otherwise."""
    return _DELEGATION.get(reaction, "corrected")


def action_of(agent_did: str) -> str:
    """The kind of action a correction answered: the tool and program ("Bash: rm"), "Edit", or
    "a reply" when the agent had handed back with words."""
    if agent_did.startswith("ran "):
        tool, _, command = agent_did[len("ran "):].partition(": ")
        program = shell_head(command).split(" ", 1)[0] if command else ""
        return f"{tool}: {program}" if program else tool
    return "a reply" if agent_did.startswith("said:") else "unknown"


# -- 1. embed -------------------------------------------------------------------------


def embed_rows(store: Store, embedder: Embedder, table: Table, *, unembedded_only: bool = False,
               unarchived_only: bool = False, stop_on_fallback: bool = False) -> int:
    """Embed the rows of ``table`` not in the embedder's space: the model is called with no
    transaction open, then each batch's vectors are written.  How many rows were embedded.

    ``stop_on_fallback``: stop when a model fails and answers from the hashed space instead of
    re-embedding in it every row already in the model's space (recall does not flip a store)."""
    done = 0
    target = embedder.space
    while True:
        rows = embeddings.needing(store.db, table, embedder.space, _BATCH, unembedded_only=unembedded_only,
                                  unarchived_only=unarchived_only)
        if not rows:
            return done
        # A model that fails mid-run answers from the hashed space from then on; each
        # batch is tagged with the space its vectors are really in.
        space, vectors = embedder.embed_with_space([r.text for r in rows])
        with store.write() as db:
            embeddings.store(db, table, [(space, to_blob(v), r.id) for r, v in zip(rows, vectors, strict=True)])
        done += len(rows)
        if stop_on_fallback and space != target:
            return done


def _recentre_lessons(store: Store, embedder: Embedder) -> None:
    """Recompute lesson centroids whose sources moved to another space."""
    for lesson_id in lessons.needing_centroid(store.db, embedder.space):
        centroid = _mean_of(store.db, lessons.sources(store.db, lesson_id), embedder.space)
        if centroid is not None:
            with store.write() as db:
                lessons.set_centroid(db, lesson_id, to_blob(centroid))


def _mean_of(db: sqlite3.Connection, episode_ids: list[str], space: str) -> Vector | None:
    vectors = [from_blob(blob) for blob in episodes.vectors_of(db, episode_ids, space)]
    return np.mean(vectors, axis=0).astype(np.float32) if vectors else None


def embed_pass(store: Store, embedder: Embedder) -> int:
    done = embed_rows(store, embedder, "episodes")
    done += embed_rows(store, embedder, "lessons")
    done += embed_rows(store, embedder, "predictions")
    _recentre_lessons(store, embedder)
    return done


# -- 2. decay -------------------------------------------------------------------------


def decay_pass(store: Store, now: datetime, config: SleepSection, report: SleepReport) -> None:
    today = now.date()
    last = store.get_meta("last_decay_day")
    with store.write() as db:
        if last is None:
            Store.set_meta(db, "last_decay_day", today.isoformat())
            return
        days = (today - datetime.fromisoformat(last).date()).days
        if days <= 0:  # the same day, or a clock that went back: nothing to count
            return
        factor = 2.0 ** (-days / config.decay_half_life_days)
        report.archived_episodes = episodes.decay(db, factor, config.archive_below)
        report.archived_lessons = lessons.decay(db, factor, config.archive_below, iso(now))
        Store.set_meta(db, "last_decay_day", today.isoformat())
        report.decay_days = days


# -- 3. consolidate -------------------------------------------------------------------


@dataclass
class _Lesson:
    id: int
    sources: int  # how many episodes it was learned from
    centroid: Vector


class _Consolidator:
    """Decides in memory, episode by episode, and queues the writes; they are committed at the
    end of each batch, and before a new lesson is inserted (its id is needed).  The sentence of
    a new lesson is phrased, and embedded, before that write: never inside it."""

    def __init__(self, store: Store, space: str, now: datetime, config: SleepSection, writer: Writer | None,
                 embedder: Embedder, report: SleepReport) -> None:
        self.store, self.space, self.now, self.config = store, space, now, config
        self.writer, self.embedder, self.report = writer, embedder, report
        self.threshold = join_threshold(space)
        self.lessons: dict[str, VectorRows] = {}
        self.lesson_info: dict[int, _Lesson] = {}
        self.waiting: dict[str, VectorRows] = {}
        self.changed: set[int] = set()
        self.new_waiting: set[str] = set()  # tonight's episodes still waiting for a repeat
        self.writes: list[_Write] = []
        # Error episode id or lesson id -> error_signature; other kinds are not keyed ("").
        self.signatures: dict[str | int, str] = {}
        # The command a correction lesson's sources object to (phrasing.objection_head) -> that lesson's id.
        self.objections: dict[str, int] = {}

    def _load(self, dim: int) -> None:
        db = self.store.db
        for kind in CONSOLIDATING_KINDS:
            self.lessons[kind] = VectorRows(dim)
            self.waiting[kind] = VectorRows(dim)
        for row in lessons.own_centroids(db, self.space):
            centroid = from_blob(row.centroid)
            if row.kind in self.lessons and centroid.shape == (dim,):
                info = _Lesson(row.id, row.sources, centroid)
                self.lesson_info[row.id] = info
                self.lessons[row.kind].add(row.id, info.centroid)
        # Episodes already considered that wait for a repeat (errors, surprises).
        for ep in episodes.waiting(db, self.space, CONSOLIDATING_KINDS):
            vector = from_blob(ep.embedding)
            if vector.shape == (dim,):
                self.waiting[ep.kind].add(ep.id, vector)
        # What mistake each waiting error and each error lesson is about (a lesson: its newest source's).
        for key, title, happened in episodes.error_fields(db):
            self.signatures[key] = error_signature(title, happened)
        # The oldest correction lesson objecting to each command takes the next objections to it.
        for lesson_id, heads in sorted(objected_commands(db).items()):
            for head in heads:
                if head not in self.objections and lesson_id in self.lesson_info:
                    self.objections[head] = lesson_id

    def _commit(self, then: Callable[[sqlite3.Connection], int] | None = None) -> int | None:
        """Commit the queued writes (and ``then``, in the same transaction); ``then``'s answer."""
        if not self.writes and then is None:
            return None
        with self.store.write() as db:
            for write in self.writes:
                write(db)
            answer = then(db) if then is not None else None
        self.writes = []
        return answer

    def run(self) -> set[int]:
        while True:
            rows = episodes.pending(self.store.db, self.space, _BATCH)
            if not rows:
                self.report.waiting = len(self.new_waiting)
                return self.changed
            if not self.lessons:
                self._load(from_blob(rows[0].embedding).shape[0])
            for row in rows:
                self._consider(row)
            self._commit()

    def _consider(self, row: episodes.Pending) -> None:
        self.report.considered += 1
        if row.kind == "correction":
            counts = self.report.delegation.setdefault(delegation_kind(row.reaction), {})
            action = action_of(row.agent_did)
            counts[action] = counts.get(action, 0) + 1
        self.writes.append(functools.partial(episodes.considered, episode_ids=[row.id]))
        if row.kind not in CONSOLIDATING_KINDS:
            return  # environment episodes and notes never consolidate
        vector = from_blob(row.embedding)
        kind = row.kind
        lessons_of_kind = self.lessons[kind]
        signature = error_signature(row.title, row.happened) if kind == "error" else ""
        head = objection_head(row.said, row.agent_did, row.reaction) if kind == "correction" else ""
        if head in self.objections:
            # An objection to a command a lesson already holds objections to joins it, however the person
            # said it: their words ("dont run", "stop trying to run powershell stuff") or none (a refused
            # call) make episodes whose vectors are far apart, and three lessons would say one thing.
            lesson_id = self.objections[head]
            self._join(lesson_id, lessons_of_kind.ids.index(lesson_id), row.id, vector, kind)
            return
        if len(lessons_of_kind):
            # Mean cosine with a lesson's sources = dot product with their centroid; an error joins only a
            # lesson about the same mistake (its class and subject, ``error_signature``).
            scores = lessons_of_kind.matrix @ vector
            for best in np.argsort(-scores)[:8].tolist():
                if scores[best] < self.threshold:
                    break
                if self.signatures.get(lessons_of_kind.ids[best], "") == signature:
                    self._join(lessons_of_kind.ids[best], best, row.id, vector, kind)
                    if head:  # the lesson that holds objections to this command from now on
                        self.objections[head] = lessons_of_kind.ids[best]
                    return
        waiting = self.waiting[kind]
        partners: list[int] = []
        if len(waiting):
            scores = waiting.matrix @ vector
            partners = [int(i) for i in np.flatnonzero(scores >= self.threshold)
                        if self.signatures.get(waiting.ids[int(i)], "") == signature]
        self.signatures[row.id] = signature
        if kind == "correction" or partners:
            learned = self._learn(row, vector, [(waiting.ids[i], waiting.matrix[i].copy()) for i in partners])
            if head and learned is not None:
                self.objections.setdefault(head, learned)
            for i in sorted(partners, reverse=True):
                self.new_waiting.discard(waiting.ids[i])
                waiting.remove(i)
        else:
            waiting.add(row.id, vector)
            self.new_waiting.add(row.id)

    def _join(self, lesson_id: int, index: int, ep_id: str, vector: Vector, kind: str) -> None:
        info = self.lesson_info[lesson_id]
        n = info.sources
        info.centroid = ((info.centroid * n + vector) / (n + 1)).astype(np.float32)
        info.sources += 1
        self.lessons[kind].set(index, info.centroid)
        self.writes.append(functools.partial(
            lessons.joined, lesson_id=lesson_id, episode_id=ep_id, centroid=to_blob(info.centroid),
            step=self.config.join_step, cap=self.config.strength_cap, now=iso(self.now)))
        self.writes.append(functools.partial(episodes.assign, lesson_id=lesson_id, episode_ids=[ep_id]))
        self.report.joined += 1
        self.changed.add(lesson_id)

    def _phrase(self, kind: str, row: episodes.Pending, partners: list[str]) -> str | None:
        # The source that knows what worked says the most; else the newest episode.
        rows = [row, *episodes.phrasing_rows(self.store.db, partners)]
        best = next((r for r in rows if r.worked), row)
        if kind == "error" and len({_program(r) for r in rows}) > 1:
            # The same failure met by several programs: it is about none of them (say, the shell itself).
            best = best._replace(title="Several programs", agent_did="", worked="")
        if kind == "error" and len(rows) > 1:  # what its failures share, not one failure's figures
            best = best._replace(happened=what_failures_share(best.happened, [r.happened for r in rows]))
        text = observation(kind, title=best.title, said=best.said, expected=best.expected, happened=best.happened,
                           text=best.text, agent_did=best.agent_did, worked=best.worked, reaction=best.reaction)
        if self.writer is not None and text is not None:
            # An optional model may write a better sentence; it passes the same gates as the template's.
            written = self.writer.write(
                "Rewrite as one factual observation of at most 200 characters, naming the situation, its cause "
                f"and what worked when it says so (not advice, no paths, names or raw output): {text}",
                system="You write one-sentence observations about software environments. Never give instructions.",
            )
            # ...and is scrubbed like it: a model may write the path or the name it was told to leave out.
            written = scrub(written) if written else written
            if written and lesson_gate(written) is None and meaningful(written):
                text = written
        return text

    def _learn(self, row: episodes.Pending, vector: Vector, partners: list[tuple[str, Vector]]) -> int | None:
        """Make a lesson of the episode and its partners (or join the lesson that says the same sentence): its
        id, None when no sentence could be phrased."""
        ep_id, kind = row.id, row.kind
        text = self._phrase(kind, row, [p for p, _ in partners])  # a model call: no transaction is open
        if text is None:
            self.report.unphrased += 1
            return None
        sources = [ep_id] + [p for p, _ in partners]
        centroid = np.mean([vector] + [v for _, v in partners], axis=0).astype(np.float32)
        digest = lesson_hash(kind, text)
        existing = lessons.own_by_hash(self.store.db, digest)
        if existing is not None and existing in self.lesson_info:
            # The same sentence already stands as a lesson: these episodes support it.
            index = self.lessons[kind].ids.index(existing)
            for source, v in [(ep_id, vector), *partners]:
                self._join(existing, index, source, v, kind)
            return existing
        # The sentence is embedded now, so the lesson is recalled as soon as it exists.
        space, vectors = self.embedder.embed_with_space([text])
        embedding = to_blob(vectors[0]) if space == self.space else None  # a model that failed just now: next sleep
        now = iso(self.now)
        new = lessons.NewLesson(hash=digest, kind=kind, text=text, cwd=row.cwd,
                                strength=self.config.lesson_initial_strength, seen=len(sources), created=now,
                                origin="", layer="personal", space=self.space, embedding=embedding,
                                centroid=to_blob(centroid), sources=sources)

        def insert(db: sqlite3.Connection) -> int:
            lesson_id = lessons.create(db, new)
            episodes.assign(db, lesson_id, sources)
            return lesson_id

        lesson_id = self._commit(insert)
        assert lesson_id is not None
        self.lesson_info[lesson_id] = _Lesson(lesson_id, len(sources), centroid)
        self.signatures[lesson_id] = self.signatures.get(ep_id, "")
        self.lessons[kind].add(lesson_id, centroid)
        self.changed.add(lesson_id)
        self.report.learned.append({"id": lesson_id, "kind": kind, "text": text, "seen": len(sources)})
        return lesson_id


def objected_commands(db: sqlite3.Connection) -> dict[int, set[str]]:
    """Correction lesson id -> the commands its sources object to (``phrasing.objection_head``), for those that
    object to any."""
    out: dict[int, set[str]] = {}
    for lesson_id, said, agent_did, reaction in episodes.correction_fields(db):
        if head := objection_head(said, agent_did, reaction):
            out.setdefault(lesson_id, set()).add(head)
    return out


# -- 4. merge -------------------------------------------------------------------------


def merge_pass(store: Store, space: str, changed: set[int], now: datetime, report: SleepReport,
               signatures: dict[str | int, str] | None = None) -> None:
    """Merge each changed lesson with any other of its kind whose sources mean the same.  ``signatures``:
    the error lessons' ``error_signature`` as the consolidation knew them (read from the store when None)."""
    threshold = join_threshold(space)
    objected: dict[int, set[str]] | None = None  # correction lesson id -> the commands its sources object to
    for lesson_id in sorted(changed):
        facts = lessons.merge_facts(store.db, lesson_id, space)
        if facts is None or facts.archived or facts.centroid is None:
            continue
        centroid = from_blob(facts.centroid)
        others = lessons.merge_candidates(store.db, facts.kind, lesson_id, space)
        if facts.kind == "correction" and others:
            # Two correction lessons objecting to one command are one (phrasing.objection_head), whatever their
            # cosine: a store made before the consolidation joined them holds both.
            if objected is None:
                objected = objected_commands(store.db)
            commands = objected.get(lesson_id, set())
            same = [other for other, _ in others if commands & objected.get(other, set())]
            if same:
                theme_id, *folded = sorted([lesson_id, *same])  # the oldest is the theme, as below
                for old_id in folded:
                    _merge(store, theme_id, old_id, space, now)
                    report.merged.append({"theme": theme_id, "alias": old_id})
                    objected[theme_id] = objected.get(theme_id, set()) | objected.pop(old_id, set())
                continue
        if facts.kind == "error" and others:
            # Two error lessons are one theme only when they are about the same mistake (error_signature).
            if signatures is None:
                signatures = {key: error_signature(title, happened)
                              for key, title, happened in episodes.error_fields(store.db) if isinstance(key, int)}
            mine = signatures.get(lesson_id, "")
            others = [(other, blob) for other, blob in others if signatures.get(other, "") == mine]
        if not others:
            continue
        scores = np.stack([from_blob(blob) for _, blob in others]) @ centroid
        best = int(np.argmax(scores))
        if scores[best] < threshold:
            continue
        other_id = others[best][0]
        # The older lesson is the theme: its text, and so its hash, stay stable.
        theme_id, old_id = (other_id, lesson_id) if other_id < lesson_id else (lesson_id, other_id)
        _merge(store, theme_id, old_id, space, now)
        report.merged.append({"theme": theme_id, "alias": old_id})


def _merge(store: Store, theme_id: int, old_id: int, space: str, now: datetime) -> None:
    theme = lessons.merge_facts(store.db, theme_id, space)
    old = lessons.merge_facts(store.db, old_id, space)
    assert theme is not None and old is not None and theme.centroid is not None and old.centroid is not None
    n_t, n_o = theme.sources, old.sources
    centroid = ((from_blob(theme.centroid) * n_t + from_blob(old.centroid) * n_o) / max(n_t + n_o, 1)
                ).astype(np.float32)
    stamp = iso(now)
    with store.write() as db:
        lessons.merge(db, theme_id, old_id, seen=theme.seen + old.seen, strength=max(theme.strength, old.strength),
                      centroid=to_blob(centroid), now=stamp)
        episodes.reassign(db, old_id, theme_id)
        predictions.close_merged(db, old_id, stamp)
        sleeps.alias(db, old_id, theme_id, stamp, old.created)


# -- 5. verify ------------------------------------------------------------------------


def refutations(db: sqlite3.Connection, pred: predictions.Open) -> list[episodes.Surprise]:
    """The surprises that refute the received lesson of ``pred``, in order: its situation arose here,
    and it did not hold (PROTOCOL.md §1, "Refutations").

    The situation arose: the hook brought the lesson into a session, given to it or withheld from it
    because the session is held out (``injections``): the moment bore on the lesson.  It did not hold:
    later in that session, and after the prediction was made, the agent reported a surprise whose
    ``expected`` says what the lesson says happens (``phrasing.claim_of``) at cosine ≥ the verify
    threshold, and whose ``happened`` does not: the agent expected what the lesson said, and something
    else happened.  Compared in the hashed space whatever the night's space: two short texts, and
    the same answer with or without a model.  This memory's own lessons are never refuted (they fail,
    or come true, as before)."""
    if pred.origin == "":
        return []
    claim = hashed_vector(claim_of(pred.kind, pred.text))
    out = []
    for surprise in episodes.surprises_after_injection(db, pred.hash, pred.made):
        expected = float(hashed_vector(surprise.expected) @ claim)
        happened = float(hashed_vector(surprise.happened) @ claim)
        if expected >= VERIFY_COSINE and happened < VERIFY_COSINE:
            out.append(surprise)
    return out


def verify_pass(store: Store, space: str, now: datetime, config: SleepSection, report: SleepReport) -> None:
    window = timedelta(days=config.prediction_window_days)
    stamp = iso(now)
    for pred in predictions.open_in(store.db, space):
        vector = from_blob(pred.embedding)
        refuting = refutations(store.db, pred)
        # Episodes of the lesson's kind that happened since the prediction was made.  A surprise that
        # refutes the lesson is not also a hit: "expected Y, happened X" holds the words of "Expected
        # X, but Y", and a bag of words cannot tell the two apart.
        against = {s.id for s in refuting}
        candidates = episodes.happened_since(store.db, pred.kind, pred.made, space)
        hit = next(((ep, at) for ep, at, eb in candidates
                    if ep not in against and float(from_blob(eb) @ vector) >= VERIFY_COSINE), None)
        entry = {"prediction": pred.id, "lesson": pred.lesson_id, "text": pred.text}
        first_refuting = refuting[0] if refuting else None
        if first_refuting is not None and (hit is None or first_refuting.at < hit[1]):
            # The first test decides: a refutation before any confirming episode (a tie goes to the
            # confirmation).  Weakened like a failure; the caller signs the refutation (publish.py).
            with store.write() as w:
                predictions.refute(w, pred.id, first_refuting.id, stamp)
                lessons.strengthen(w, pred.lesson_id, -config.fail_step, float("inf"), stamp)
            report.refuted.append(entry | {"episode": first_refuting.id, "hash": pred.hash})
        elif hit is not None:
            with store.write() as w:
                predictions.confirm(w, pred.id, hit[0], stamp)
                lessons.strengthen(w, pred.lesson_id, config.confirm_step, config.strength_cap, stamp)
            report.confirmed.append(entry | {"episode": hit[0]})
        elif now - parse_time(pred.made) >= window:
            with store.write() as w:
                predictions.fail(w, pred.id, stamp)
                lessons.strengthen(w, pred.lesson_id, -config.fail_step, float("inf"), stamp)
            report.failed.append(entry)


# -- 6. predict -----------------------------------------------------------------------


def predict_pass(store: Store, space: str, now: datetime, config: SleepSection, report: SleepReport) -> None:
    rows = lessons.to_predict(store.db, config.predict_min_strength, space)
    with store.write() as db:
        for row in rows:
            # Predict from what the sources mean when there are sources (a closer match to
            # future episodes than the sentence), else from the sentence itself.
            blob = row.centroid if row.centroid is not None else row.embedding
            if blob is None:
                continue
            vector = from_blob(blob)
            norm = float(np.linalg.norm(vector))
            if norm == 0:
                continue
            predictions.make(db, row.id, row.text, iso(now), space, to_blob((vector / norm).astype(np.float32)))
            report.predicted += 1


# -- the whole night ------------------------------------------------------------------


def sleep(store: Store, *, now: datetime, embedder: Embedder, config: Config,
          writer: Writer | None = None) -> SleepReport:
    """Run every pass in order and record the report; returns it."""
    report = SleepReport(started=iso(now))
    with store.write() as db:
        sleep_id = sleeps.begin(db, iso(now))
    embedder.probe()  # a model that answers now is this night's space; else the hashed one
    report.embedded = embed_pass(store, embedder)
    space = report.space = embedder.space  # after the pass: a model may have failed during it
    rules = config.sections.sleep  # the passes read only the sleep section
    decay_pass(store, now, rules, report)
    consolidator = _Consolidator(store, space, now, rules, writer, embedder, report)
    changed = consolidator.run()
    merge_pass(store, space, changed, now, report, consolidator.signatures or None)
    embed_rows(store, embedder, "lessons")  # sentences a failing model left unembedded tonight
    verify_pass(store, space, now, rules, report)
    predict_pass(store, space, now, rules, report)
    report.finished = iso(now)
    with store.write() as db:
        sleeps.finish(db, sleep_id, report.finished, json.dumps(report.to_json()))
    return report
