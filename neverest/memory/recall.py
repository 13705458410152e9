"""Recall: the episodes and lessons a query bears on, scored as in seeds/001.

score = 0.6·cosine + 0.25·2^(−age/30 days) + 0.15·min(strength, 2)/2

over every unarchived episode and lesson whose vector is in the query's space.
The episodes returned are touched (+0.1 strength, +1 recall): what is recalled
is used, and what is used decays more slowly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

import numpy as np

from neverest.clock import iso
from neverest.memory.embed import Embedder, stack
from neverest.memory.store import Store

RECALL_HALF_LIFE_DAYS = 30.0
TOUCH_STEP = 0.1


@dataclass(frozen=True)
class Hit:
    type: str  # "episode" or "lesson"
    id: str
    kind: str
    text: str
    score: float
    cosine: float
    strength: float
    at: str

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def recall(store: Store, query: str, *, now: datetime, embedder: Embedder, k: int = 5,
           touch: bool = True) -> list[Hit]:
    """The top ``k`` episodes and lessons for ``query``; touches the episodes returned."""
    q = embedder.embed([query])[0]
    # Score on the narrow columns first; read the texts of the top k only.
    # Ages in days are computed by SQLite (julianday), far faster than parsing 10 000 strings here.
    day = iso(now)
    episodes = store.db.execute(
        "SELECT rowid, strength, max(julianday(?) - julianday(at), 0), embedding, at FROM episodes "
        "WHERE archived = 0 AND space = ? AND embedding IS NOT NULL", (day, embedder.space),
    ).fetchall()
    lessons = store.db.execute(
        "SELECT id, strength, max(julianday(?) - julianday(updated), 0), embedding, updated FROM lessons "
        "WHERE archived = 0 AND space = ? AND embedding IS NOT NULL", (day, embedder.space),
    ).fetchall()
    rows = episodes + lessons
    if not rows or k < 1:
        return []
    cosines = stack([r[3] for r in rows], len(q)) @ q
    ages = np.array([r[2] for r in rows], dtype=np.float64)
    recency = np.power(2.0, -ages / RECALL_HALF_LIFE_DAYS)
    strengths = np.array([r[1] for r in rows], dtype=np.float64)
    scores = 0.6 * cosines + 0.25 * recency + 0.15 * np.minimum(strengths, 2.0) / 2.0
    k = min(k, len(rows))
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.argsort(-scores[top], kind="stable")]
    hits = []
    for i in top.tolist():
        is_episode = i < len(episodes)
        key = rows[i][0]
        if is_episode:
            ep_id, kind, text = store.db.execute("SELECT id, kind, gist FROM episodes WHERE rowid = ?",
                                                 (key,)).fetchone()
        else:
            ep_id, (kind, text) = str(key), store.db.execute("SELECT kind, text FROM lessons WHERE id = ?",
                                                            (key,)).fetchone()
        hits.append(Hit(type="episode" if is_episode else "lesson", id=ep_id, kind=kind, text=text,
                        score=round(float(scores[i]), 4), cosine=round(float(cosines[i]), 4),
                        strength=round(float(strengths[i]), 4), at=rows[i][4]))
    touched = [(TOUCH_STEP, iso(now), h.id) for h in hits if h.type == "episode"]
    if touch and touched:
        with store.write() as db:
            db.executemany("UPDATE episodes SET strength = strength + ?, recalls = recalls + 1, last_touched = ? "
                           "WHERE id = ?", touched)
    return hits
