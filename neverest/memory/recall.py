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
import numpy.typing as npt

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


def _ages_days(stamps: list[str], now: datetime) -> npt.NDArray[np.float64]:
    # Timestamps are ISO 8601 UTC; numpy parses them once, vectorised.
    times = np.array([s.rstrip("Z")[:26] for s in stamps], dtype="datetime64[us]")
    now64 = np.datetime64(now.replace(tzinfo=None).isoformat(), "us")
    return np.maximum((now64 - times).astype("float64") / 86_400e6, 0.0)


def recall(store: Store, query: str, *, now: datetime, embedder: Embedder, k: int = 5,
           touch: bool = True) -> list[Hit]:
    """The top ``k`` episodes and lessons for ``query``; touches the episodes returned."""
    q = embedder.embed([query])[0]
    episodes = store.db.execute(
        "SELECT id, kind, gist, strength, at, embedding FROM episodes WHERE archived = 0 AND space = ? "
        "AND embedding IS NOT NULL", (embedder.space,),
    ).fetchall()
    lessons = store.db.execute(
        "SELECT id, kind, text, strength, updated, embedding FROM lessons WHERE archived = 0 AND space = ? "
        "AND embedding IS NOT NULL",
        (embedder.space,),
    ).fetchall()
    rows = [("episode", *r) for r in episodes] + [("lesson", *r) for r in lessons]
    if not rows:
        return []
    dim = len(q)
    vectors = stack([r[6] for r in rows], dim)
    cosines = vectors @ q
    recency = np.power(2.0, -_ages_days([r[5] for r in rows], now) / RECALL_HALF_LIFE_DAYS)
    strengths = np.array([r[4] for r in rows], dtype=np.float64)
    scores = 0.6 * cosines + 0.25 * recency + 0.15 * np.minimum(strengths, 2.0) / 2.0
    k = max(0, min(k, len(rows)))
    top = np.argpartition(-scores, k - 1)[:k] if k else np.array([], dtype=int)
    top = top[np.argsort(-scores[top], kind="stable")]
    hits = [Hit(type=rows[i][0], id=str(rows[i][1]), kind=rows[i][2], text=rows[i][3], score=round(float(scores[i]), 4),
                cosine=round(float(cosines[i]), 4), strength=round(float(strengths[i]), 4), at=rows[i][5])
            for i in top]
    touched = [(TOUCH_STEP, iso(now), h.id) for h in hits if h.type == "episode"]
    if touch and touched:
        with store.write() as db:
            db.executemany("UPDATE episodes SET strength = strength + ?, recalls = recalls + 1, last_touched = ? "
                           "WHERE id = ?", touched)
    return hits
