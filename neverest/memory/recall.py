"""Recall: the episodes and lessons a query bears on, scored as docs/reference.md ("Recall") says.

score = 0.6·cosine + 0.25·2^(−age/30 days) + 0.15·min(strength, 2)/2
        + 1 if the row shares a key term of the query, + 0.2·BM25/best BM25

over every unarchived episode and lesson whose vector is in the query's space and whose
cosine with the query reaches the relevance floor (``relevance_floor``), or that shares a key
term (``keyterms.py``: the query's words that are not filler or generic to failures, found in
the full-text index, inside longer identifiers too): a query that shares nothing with the
memory returns nothing, rather than the most recent rows at cosine 0.  A row sharing a key
term ranks above every row sharing none ("fastapi module not found" puts ModuleNotFoundError
for fastapi above a linker that was not found).  The episodes returned are touched (+0.1 strength, +1 recall): what is
recalled is used, and what is used decays more slowly.

Everything stored is recallable at once: events are stored with a hashed vector and
lessons with their sentence's vector.  With a model embedder, the rows not yet in the
model's space are embedded before ranking (the model called with no transaction open,
then the vectors written); a model that does not answer leaves recall in the hashed space.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Final, NamedTuple

from neverest.clock import iso
from neverest.memory import hashed as hashed_space
from neverest.memory.keyterms import key_terms, matches
from neverest.memory.queries import embeddings, episodes, lessons
from neverest.memory.queries.embeddings import Table
from neverest.memory.space import HASHED_SPACE
from neverest.memory.store import Store

# numpy and the embedders are loaded only for a model's space, or for rows stored without a vector: in the
# hashed space recall scores with the standard library (memory/hashed.py), and `neverestctl recall` without
# a daemon starts in a third of numpy's import time (docs/figures.md, start-up).
if TYPE_CHECKING:
    from neverest.memory.embed import Embedder

RECALL_HALF_LIFE_DAYS: Final = 30.0
TOUCH_STEP: Final = 0.1
# The relevance floor, a minimum cosine with the query.  In the hashed space a cosine is above
# 0 when two texts share a word or a word pair, or when different words collide in one of
# the 256 slots.  One shared word between a short query and a gist of ten to twenty words
# scores about 0.2-0.4; 0.1 keeps every such match and drops the cosine-0 rows and most
# collisions.  Since one collision scores like one shared word, a hashed hit must also share
# a word with the query (checked on the few top rows only): a query of words the memory
# never saw returns nothing.  A model's space puts unrelated sentences well above 0
# (typically 0.1-0.3 for the small embedding models served locally), so its floor is higher.
HASHED_MIN_COSINE: Final = 0.1
# A row that shares a key term of the query outranks any that shares none: the rest of the score is at most 1.
KEY_TERM_BONUS: Final = 1.0
BM25_WEIGHT: Final = 0.2
MODEL_MIN_COSINE: Final = 0.3
# At most this many rows per hit asked for are read to find hits that share a word.
_CHECKED_PER_HIT: Final = 10


def relevance_floor(space: str) -> float:
    return HASHED_MIN_COSINE if space == HASHED_SPACE else MODEL_MIN_COSINE


class Hit(NamedTuple):
    type: str  # "episode" or "lesson"
    id: str
    kind: str
    text: str
    score: float
    cosine: float
    strength: float
    at: str

    def to_json(self) -> dict[str, object]:
        return self._asdict()


def catch_up(store: Store, embedder: Embedder | None) -> int:
    """Embed the unarchived episodes and lessons recall would miss; how many were embedded.

    In the hashed space (``embedder`` None: no model configured) only rows never embedded; in a
    model's space every row not in it, stopping as soon as the model fails (the store is not moved
    back to the hashed space).
    """
    space = HASHED_SPACE if embedder is None else embedder.space
    hashed = space == HASHED_SPACE
    tables: tuple[Table, ...] = ("episodes", "lessons")
    if hashed and not episodes.any_unembedded(store.db):
        # Every episode is stored with its hashed vector: only lessons (a few hundred rows) need a look.
        tables = ("lessons",)
    # Most recalls find nothing to embed: the sleep pass that embeds (and the phrasing, safety and error
    # patterns it imports) is loaded only when a row needs it (docs/figures.md, start-up).
    tables = tuple(t for t in tables if embeddings.needing(store.db, t, space, 1, unembedded_only=hashed,
                                                            unarchived_only=True))
    if not tables:
        return 0
    from neverest.memory.sleep import embed_rows

    if embedder is None:
        from neverest.memory.embed import HashedEmbedder

        embedder = HashedEmbedder()

    return sum(embed_rows(store, embedder, table, unembedded_only=hashed, unarchived_only=True,
                          stop_on_fallback=True) for table in tables)


def _ranker(query: str, embedder: Embedder | None) -> tuple[str, Callable[[list[bytes]], list[float]]]:
    """The space recall ranks in, and the query's cosine with stored rows of it."""
    space = HASHED_SPACE
    if embedder is not None and embedder.space != HASHED_SPACE:
        space, vectors = embedder.embed_with_space([query])  # a model that fails now answers in the hashed space
    if space == HASHED_SPACE:
        entries = hashed_space.entries(query)
        return space, lambda blobs: hashed_space.cosines(blobs, entries)
    vector = vectors[0]

    def model_cosines(blobs: list[bytes]) -> list[float]:
        from neverest.memory.embed import stack

        product: list[float] = (stack(blobs, len(vector)) @ vector).astype("float64").tolist()
        return product

    return space, model_cosines


def recall(store: Store, query: str, *, now: datetime, embedder: Embedder | None, k: int = 5,
           touch: bool = True) -> list[Hit]:
    """The top ``k`` episodes and lessons for ``query`` at or above the relevance floor;
    touches the episodes returned.  ``embedder`` None: the hashed space (no model configured)."""
    catch_up(store, embedder)
    space, cosines_with = _ranker(query, embedder)
    # Score on the narrow columns first; read the texts of the top k only.
    day = iso(now)
    found, learned = episodes.recall_scan(store.db, day, space), lessons.recall_scan(store.db, day, space)
    n_episodes = len(found.keys)
    keys = found.keys + learned.keys
    if not keys or k < 1:
        return []
    cosines = cosines_with(found.embeddings + learned.embeddings)
    ages = found.age_days + learned.age_days
    strengths = found.strengths + learned.strengths
    # Key terms (keyterms.py): a row sharing one ranks above every row sharing none, and BM25 orders them.
    terms = key_terms(query)
    bm25: dict[int, float] = {}
    if terms:
        for offset, table, table_keys in ((0, "episodes", found.keys), (n_episodes, "lessons", learned.keys)):
            weights = matches(store.db, table, terms)
            if weights:
                for i, key in enumerate(table_keys):
                    weight = weights.get(int(key))
                    if weight is not None and weight > 0:
                        bm25[offset + i] = weight
    floor = relevance_floor(space)
    relevant = [i for i, cosine in enumerate(cosines) if cosine >= floor or i in bm25]
    if not relevant:
        return []
    scores: dict[int, float] = {}
    for i in relevant:
        score = (0.6 * cosines[i] + 0.25 * 2.0 ** (-ages[i] / RECALL_HALF_LIFE_DAYS)
                 + 0.15 * min(strengths[i], 2.0) / 2.0)
        weight = bm25.get(i)
        if weight is not None:
            score = score + KEY_TERM_BONUS + BM25_WEIGHT * weight
        scores[i] = score
    hashed = space == HASHED_SPACE
    n = min(k * _CHECKED_PER_HIT if hashed else k, len(relevant))
    # Highest score first; a tie goes to the row read first (episodes before lessons, then by key order).
    top = heapq.nsmallest(n, relevant, key=lambda i: (-scores[i], i))
    query_words = set(hashed_space.words(query))
    hits: list[Hit] = []
    for i in top:
        if len(hits) == k:
            break
        is_episode = i < n_episodes
        key = keys[i]
        if is_episode:
            ep_id, kind, text, at = episodes.shown(store.db, key)
        else:
            ep_id, (kind, text, at) = str(key), lessons.shown(store.db, key)
        if hashed and i not in bm25 and query_words.isdisjoint(hashed_space.words(text)):
            continue  # a collision of different words in the hashed slots, not a match
        hits.append(Hit(type="episode" if is_episode else "lesson", id=ep_id, kind=kind, text=text,
                        score=round(scores[i], 4), cosine=round(cosines[i], 4),
                        strength=round(float(strengths[i]), 4), at=at))
    touched = [h.id for h in hits if h.type == "episode"]
    if touch and touched:
        with store.write() as db:
            episodes.touch(db, touched, TOUCH_STEP, iso(now))
    return hits
