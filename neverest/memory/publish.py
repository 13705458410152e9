"""What leaves this memory, and only by the owner's choice (safety rules 2 and 4).

- Publication is opt-in per project: ``neverestctl publish --project PATH`` lists the
  project; only lessons learned from episodes in it (its folder or below) are signed.
- Corrections are lessons about the person: published only when the project was opted
  in with ``--corrections``.
- A lesson whose sentence still holds what scrubbing removes, or says nothing once scrubbed
  (``scrub.withheld``), is never signed: it stays personal, and ``held_back`` says which and why.
- Only lessons leave, as signed records of their sentence, kind, seen and strength;
  never episodes, paths or the project's name.
- Each record carries the next ``seq`` of this origin, taken and stored in the same
  transaction as the record, so a seq is never signed twice.  A lesson whose ``seen``
  or strength (to one decimal, so that daily decay does not re-sign everything) changed
  is signed again with a new seq, superseding the older version.
- Confirmations are signed for lessons received from elsewhere whose predictions came
  true here (once per lesson), refutations for those whose situation arose here and that
  did not hold (once per lesson, at most ``refute_origin_max`` in all), and revocations on
  the owner's request.  Like confirmations, refutations name only a hash: they are signed
  whether or not a project is published.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from neverest.clock import iso
from neverest.identity import Identity
from neverest.memory import holdings
from neverest.memory.queries import lessons
from neverest.memory.queries import projects as projects_table
from neverest.memory.scrub import withheld
from neverest.memory.store import Store, meta_value
from neverest.records import Record, sign_confirm, sign_lesson, sign_refute, sign_revoke


def _project_path(path: str | os.PathLike[str]) -> str:
    return str(Path(path).expanduser().resolve())


def opt_in(store: Store, path: str | os.PathLike[str], *, corrections: bool, now: datetime) -> str:
    project = _project_path(path)
    with store.write() as db:
        projects_table.opt_in(db, project, corrections, iso(now))
    return project


def opt_out(store: Store, path: str | os.PathLike[str]) -> bool:
    with store.write() as db:
        return projects_table.opt_out(db, _project_path(path))


def projects(store: Store) -> list[tuple[str, bool]]:
    return [(p.path, p.corrections) for p in projects_table.listing(store.db)]


def _sign_next(db: sqlite3.Connection, origin: str, build: Callable[[int], Record], now: datetime) -> Record:
    counter = meta_value(db, "seq")
    # After a restore from backup the counter may lag behind this memory's own records that
    # peers hand back; signing a seq already used would make this memory fork itself.
    seq = max(int(counter) if counter else 0, holdings.max_seq(db, origin)) + 1
    Store.set_meta(db, "seq", str(seq))
    record = build(seq)
    holdings.put(db, record, source=holdings.OWN_SOURCE, now=now)
    return record


def _lesson_record(identity: Identity, seq: int, *, kind: str, text: str, seen: int, strength: float,
                   updated: str) -> Record:
    return sign_lesson(identity.signing_key, kind=kind, text=text, seen=seen, strength=strength, updated=updated,
                       seq=seq)


def _confirm_record(identity: Identity, target: str, at: str, seq: int) -> Record:
    return sign_confirm(identity.signing_key, target, at=at, seq=seq)


def _refute_record(identity: Identity, target: str, at: str, seq: int) -> Record:
    return sign_refute(identity.signing_key, target, at=at, seq=seq)


def _chosen(db: sqlite3.Connection) -> list[tuple[str, str, str, int, float]]:
    """(hash, kind, text, seen, strength) of this memory's lessons in the projects the owner chose to share."""
    out = []
    chosen = [(p.path, p.corrections) for p in projects_table.listing(db)]
    for digest, kind, text, seen, strength, cwd in lessons.own_untombstoned(db):
        for path, corrections in chosen:
            inside = cwd == path or cwd.startswith(path.rstrip("/") + "/")
            if inside and (kind != "correction" or corrections):
                out.append((digest, kind, text, seen, strength))
                break
    return out


def publishable(db: sqlite3.Connection) -> list[tuple[str, str, str, int, float]]:
    """(hash, kind, text, seen, strength) of this memory's lessons the owner chose to share, but those
    whose text scrubbing keeps back (``held_back``)."""
    return [lesson for lesson in _chosen(db) if withheld(lesson[2]) is None]


def held_back(db: sqlite3.Connection) -> dict[str, str]:
    """Why each lesson of a published project is not signed, by hash: its text still holds what
    scrubbing removes or says nothing once scrubbed (``scrub.withheld``).  It stays personal."""
    out = {}
    for digest, _, text, _, _ in _chosen(db):
        reason = withheld(text)
        if reason is not None:
            out[digest] = reason
    return out


def publish(store: Store, identity: Identity, now: datetime) -> list[Record]:
    """Sign every publishable lesson that is new or changed since it was last signed."""
    signed = []
    with store.write() as db:
        for digest, kind, text, seen, strength in publishable(db):
            rounded = round(strength, 1)
            current = holdings.current_lesson_raw(db, identity.origin, digest)
            if current is not None:
                held = json.loads(current)
                if held["seen"] == seen and held["strength"] == rounded:
                    continue
            signed.append(_sign_next(db, identity.origin, functools.partial(
                _lesson_record, identity, kind=kind, text=text, seen=seen, strength=rounded, updated=iso(now)), now))
    return signed


def revoke(store: Store, identity: Identity, target: str, now: datetime) -> Record:
    """Withdraw this memory's lesson ``target``: a signed revocation, and it is no longer published."""
    with store.write() as db:
        record = _sign_next(db, identity.origin,
                            lambda seq: sign_revoke(identity.signing_key, target, at=iso(now), seq=seq), now)
        lessons.archive(db, target, origin="", now=iso(now))
        holdings.bury(db, target, "revoked", now)
    return record


def confirm_received(store: Store, identity: Identity, lesson_ids: list[int], now: datetime) -> list[Record]:
    """Sign a confirmation for each received lesson whose prediction came true here.

    Only for lessons from another origin that this memory did not publish itself (a
    lesson it had learned on its own would have been corroborated, not received as a
    candidate), and once per lesson: one origin counts once.
    """
    signed = []
    with store.write() as db:
        for lesson_id in lesson_ids:
            row = lessons.identity(db, lesson_id)
            if row is None or row[1] in ("", identity.origin):
                continue
            digest = row[0]
            if not holdings.signed_about(db, identity.origin, digest):
                signed.append(_sign_next(db, identity.origin,
                                         functools.partial(_confirm_record, identity, digest, iso(now)), now))
    return signed


def refute_received(store: Store, identity: Identity, lesson_ids: list[int], now: datetime, *,
                    most: int) -> list[Record]:
    """Sign a refutation for each received lesson the verify pass found refuted here.

    Never for a lesson this memory learned or published itself (its own lessons are not refuted:
    the verify pass does not look, and a lesson learned here with the same hash is this memory's
    own), once per lesson however often it is refuted, and no more than ``most`` in all (0: no
    bound), the bound receivers keep per origin (``refute_origin_max``): past it they would refuse
    them as a flood.
    """
    signed = []
    with store.write() as db:
        held = holdings.refute_counts(db, [identity.origin]).get(identity.origin, 0)
        for lesson_id in lesson_ids:
            row = lessons.identity(db, lesson_id)
            if row is None or row[1] in ("", identity.origin):
                continue
            digest = row[0]
            if lessons.is_own_lesson(db, digest, identity.origin) or holdings.refuted_by(db, identity.origin, digest):
                continue
            if most and held >= most:
                break
            signed.append(_sign_next(db, identity.origin,
                                     functools.partial(_refute_record, identity, digest, iso(now)), now))
            held += 1
    return signed
