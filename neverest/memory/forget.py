"""Forget: the owner removes episodes from the memory, for good.

One selector names what goes: an episode by id, a whole session, or every episode
that happened before a time.  In one write transaction the episodes are deleted (their
vectors live in the same rows, so they leave the recall index with them), their
references in ``lesson_sources`` are removed, the predictions they resolved are deleted,
and the centroids of the lessons they supported are recomputed from the sources left
(a lesson stays: it is a sentence this memory phrased, and it may have been shared).

Deletion is real on disk: the store runs with ``secure_delete`` on (store.py), so freed
space is overwritten; the file is then rebuilt (``VACUUM``: a store made before that
setting may hold stale copies of moved rows in unused page space), and the WAL is
checkpointed and truncated, so the text is in neither the database file nor the WAL.
The rebuild costs time in proportion to the store's size (about a second for 10 000
episodes), acceptable for a rare request of the owner.  The renders (``lessons.md``...) are
re-run by the caller (the memory service), since they are files next to the store.

Not covered: a line already drained from ``inbox.jsonl`` stays in that file until it
rotates (the inbox is the agents' file to append to), and copies the owner made elsewhere.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

import numpy as np

from neverest.clock import iso
from neverest.memory.embed import from_blob, to_blob
from neverest.memory.queries import episodes, lessons, predictions
from neverest.memory.store import Store, StoreError


@dataclass(frozen=True)
class Forgotten:
    episodes: int
    lesson_sources: int
    predictions: int
    lessons_recentred: int
    vacuumed: bool  # False when another writer kept the file from being rebuilt
    wal_truncated: bool  # False when a reader kept the WAL from being truncated: run again later

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def forget(store: Store, *, episode: str | None = None, session: str | None = None,
           before: datetime | None = None) -> Forgotten:
    """Remove the episodes one selector names; what was removed.  Raises ValueError unless
    exactly one selector is given."""
    if sum(x is not None for x in (episode, session, before)) != 1:
        raise ValueError("forget takes exactly one of episode, session, before")
    with store.write() as db:
        ids = episodes.select_ids(db, episode=episode, session=session,
                                  before=None if before is None else iso(before))
        touched = lessons.of_sources(db, ids)
        sources = lessons.drop_sources(db, ids)
        resolved = predictions.delete_resolved_by(db, ids)
        gone = episodes.delete(db, ids)
        for lesson_id in touched:
            space = lessons.space_of(db, lesson_id)
            blobs = [] if space is None else episodes.vectors_of(db, lessons.sources(db, lesson_id), space)
            centroid = np.mean([from_blob(b) for b in blobs], axis=0).astype(np.float32) if blobs else None
            lessons.set_centroid(db, lesson_id, None if centroid is None else to_blob(centroid))
    # Always, even when nothing matched: forgetting again finishes what a busy store interrupted.
    try:
        store.vacuum()
        vacuumed = True
    except StoreError:
        vacuumed = False  # the deletion is committed; another writer held the lock: reported
    truncated = store.checkpoint_truncate()
    return Forgotten(episodes=gone, lesson_sources=sources, predictions=resolved, lessons_recentred=len(touched),
                     vacuumed=vacuumed, wal_truncated=truncated)
