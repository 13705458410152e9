"""Texts as vectors, every vector tagged with the space it lives in.

There are two kinds of space (docs/reference.md, "Sleep" and "Recall"):

- ``hashed-256``: signed feature hashing of a text's words and adjacent-word bigrams into 256
  dimensions.  Always there, deterministic, bit-identical across processes and machines.
- ``model:<name>``: the vectors of an embedding model behind an OpenAI-compatible API
  (``POST {base_url}/embeddings``), when one is configured and answering.

Vectors of different spaces are never compared, and each space has its own join threshold.  The
store tags every blob with its space, and a sleep begins by re-embedding whatever is not in the
current space, so the memory moves to a model when one appears and back when it goes away.

The model fails soft: when a call fails for any reason, ``ModelEmbedder`` returns the hashed
vectors instead, sets ``last_error``, and stays in the hashed space until ``probe()`` reaches the
model again, so that a run that lost its model does not wait on every later call.  A sleep
therefore goes:

    embedder.probe()                       # one request; on failure the hashed space, latched
    while some texts are not in embedder.space:
        space, vectors = embedder.embed_with_space(next batch of them)
        store the vectors tagged with `space`
    space = embedder.space                 # the space of this run: it can only have fallen
                                           # from the model's to the hashed, never back

``embed_with_space`` always says which space its vectors are in; reading ``space`` after a
plain ``embed`` is also right, because of the latch.  Embedders are not shared between threads.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol, TypeAlias

from neverest.memory.hashed import BIGRAM_WEIGHT as BIGRAM_WEIGHT
from neverest.memory.hashed import features
from neverest.memory.hashed import words as words
from neverest.memory.model import Endpoint, ModelClient, ModelError
from neverest.memory.space import DIM as DIM
from neverest.memory.space import HASHED_SPACE as HASHED_SPACE
from neverest.memory.space import MODEL_SPACE_PREFIX as MODEL_SPACE_PREFIX

if TYPE_CHECKING:
    import httpx
    import numpy as np
    import numpy.typing as npt

    FloatArray: TypeAlias = npt.NDArray[np.float32]
else:
    # numpy on first use: the daemon imports this module at start-up but embeds only in a pass.
    from neverest.lazy_numpy import numpy_for

    np = numpy_for(__name__)

    FloatArray = Any  # only ever an annotation; the real alias is the type checker's


# Thresholds as docs/reference.md's "Sleep" section states them: an episode joins a lesson
# when its mean cosine with the lesson's sources reaches 0.55 in the hashed space or 0.62 in a
# model's space (model spaces put unrelated texts closer together than hashing does); a
# prediction is verified by an episode at cosine ≥ 0.5, a figure the source gives for the
# hashed space and that is used in every space.
HASHED_JOIN_COSINE: Final = 0.55
MODEL_JOIN_COSINE: Final = 0.62
VERIFY_COSINE: Final = 0.5


MAX_MODEL_DIM: Final = 8192
DEFAULT_BATCH_SIZE: Final = 64  # 64 rows of 8192 numbers is ~13 MB of JSON, within the body limit
_PROBE_TEXT: Final = "neverest embedding probe"
# Episodes are a title and a gist; a text far longer than that would only risk a server that
# refuses it over its context length, and with it the whole batch.
MAX_MODEL_TEXT_CHARS: Final = 8192
_FLOAT32_MAX: Final = 3.4028234663852886e38  # float(np.finfo(np.float32).max), without importing numpy



class Embedded(NamedTuple):
    """Vectors (one unit row per text, float32) and the space they are in."""

    space: str
    vectors: FloatArray


class Embedder(Protocol):
    """Turns texts into unit vectors and says which space they are in."""

    @property
    def space(self) -> str:
        """The space of the vectors the last call returned, and the next will unless it fails."""

    @property
    def dim(self) -> int | None:
        """The dimension of that space; None for a model not asked yet."""

    @property
    def last_error(self) -> str | None:
        """Why the model could not be used, while it cannot; None otherwise."""

    def probe(self) -> str:
        """Try the preferred space again and return the space calls are in from now on."""

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """An n × dim float32 matrix of unit rows (zero rows for texts without words)."""

    def embed_with_space(self, texts: Sequence[str]) -> Embedded:
        """``embed`` together with the space of its vectors."""

    def close(self) -> None:
        """Release the connections, if any."""


def model_space(model: str) -> str:
    """The name of a model's space."""
    return MODEL_SPACE_PREFIX + model


def join_threshold(space: str) -> float:
    """The mean cosine at which an episode joins a lesson, in ``space``."""
    if space == HASHED_SPACE:
        return HASHED_JOIN_COSINE
    if space.startswith(MODEL_SPACE_PREFIX):
        return MODEL_JOIN_COSINE
    raise ValueError(f"unknown embedding space {space!r}")


def _hashed_matrix(texts: Sequence[str]) -> FloatArray:
    # All texts go into one flat count array with one bincount: per-text numpy calls would
    # cost more than the hashing.
    cells: list[int] = []
    weights: list[float] = []
    for row, text in enumerate(_checked(texts)):
        base = row * DIM
        for index, weight in features(text):
            cells.append(base + index)
            weights.append(weight)
    counts = np.bincount(np.asarray(cells, dtype=np.intp), weights=weights, minlength=len(texts) * DIM)
    return unit(counts.reshape(len(texts), DIM))


def hashed_vector(text: str) -> FloatArray:
    """The text's vector in the hashed space: float32, shape (256,), unit norm, or zeros without words."""
    return _hashed_matrix((text,)).reshape(DIM)


class HashedEmbedder:
    """The hashed space: always available, nothing to fail."""

    space: Final = HASHED_SPACE
    dim: Final = DIM
    last_error: Final[str | None] = None

    def probe(self) -> str:
        return HASHED_SPACE

    def embed(self, texts: Sequence[str]) -> FloatArray:
        return _hashed_matrix(texts)

    def embed_with_space(self, texts: Sequence[str]) -> Embedded:
        return Embedded(HASHED_SPACE, _hashed_matrix(texts))

    def close(self) -> None:
        """Nothing to release."""


class ModelEmbedder:
    """A model's space, falling back to the hashed space whenever the model fails.

    Texts are sent ``batch_size`` at a time, each cut to ``MAX_MODEL_TEXT_CHARS``; a call's
    vectors are all in one space, so when any batch fails the whole call is answered from the
    hashed space.  Blank texts are not sent (servers refuse empty inputs) and get zero rows, as
    texts without words do when hashed.
    The model's answer is checked: one row per text, indexed 0..n-1 once each, all of one
    dimension between 1 and 8192 (the same as earlier answers since the last probe), finite
    float32 numbers.  Rows are scaled to unit length, since not every model returns them so.
    """

    def __init__(self, endpoint: Endpoint, *, batch_size: int = DEFAULT_BATCH_SIZE,
                 transport: httpx.BaseTransport | None = None) -> None:
        """``transport``: an httpx transport to reach the model through (tests fake the network with one)."""
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.endpoint = endpoint
        self.model_space = model_space(endpoint.model)
        self.batch_size = batch_size
        self.last_error: str | None = None
        self._model_dim: int | None = None
        self._client = ModelClient(endpoint, transport=transport)

    @property
    def space(self) -> str:
        return HASHED_SPACE if self.last_error is not None else self.model_space

    @property
    def dim(self) -> int | None:
        return DIM if self.last_error is not None else self._model_dim

    def probe(self) -> str:
        """Clear the latch, ask the model for one vector, and return the space of the run.

        The model's dimension is learnt afresh, since the server may now serve another build.
        """
        self.last_error = None
        self._model_dim = None
        return self.embed_with_space([_PROBE_TEXT]).space

    def embed(self, texts: Sequence[str]) -> FloatArray:
        return self.embed_with_space(texts).vectors

    def embed_with_space(self, texts: Sequence[str]) -> Embedded:
        if self.last_error is None:
            try:
                return Embedded(self.model_space, self._embed_model(_checked(texts)))
            except ModelError as exc:
                self.last_error = str(exc)
        return Embedded(HASHED_SPACE, _hashed_matrix(texts))

    def _embed_model(self, texts: Sequence[str]) -> FloatArray:
        sent = [i for i, text in enumerate(texts) if text.strip()]
        parts = [self._request([texts[i][:MAX_MODEL_TEXT_CHARS] for i in sent[start:start + self.batch_size]])
                 for start in range(0, len(sent), self.batch_size)]
        if parts:
            dim = parts[0].shape[1]
        else:  # only blank texts: the zero rows still need the model's dimension
            dim = self._model_dim if self._model_dim is not None else self._request([_PROBE_TEXT]).shape[1]
        vectors = np.zeros((len(texts), dim), dtype=np.float32)
        if parts:
            vectors[sent] = np.concatenate(parts)
        return vectors

    def _request(self, batch: list[str]) -> FloatArray:
        answer = self._client.post_json("/embeddings", {"model": self.endpoint.model, "input": batch})
        vectors = _parse_embeddings(answer, len(batch))
        dim = vectors.shape[1]
        if self._model_dim is None:
            self._model_dim = dim
        elif dim != self._model_dim:
            raise ModelError(f"the model answered {dim} dimensions after {self._model_dim}")
        return vectors

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ModelEmbedder:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _parse_embeddings(answer: object, count: int) -> FloatArray:
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        raise ModelError("the embeddings answer has no data list")
    if len(data) != count:
        raise ModelError(f"the embeddings answer has {len(data)} rows for {count} texts")
    rows: list[object] = [None] * count
    for position, item in enumerate(data):
        if not isinstance(item, dict):
            raise ModelError(f"row {position} of the embeddings answer is not an object")
        index = item.get("index", position)
        if type(index) is not int or not 0 <= index < count or rows[index] is not None:
            raise ModelError("the embeddings answer does not index its rows 0..n-1 once each")
        rows[index] = item.get("embedding")
    try:
        # No dtype forced: numpy would turn "1.5" or None into numbers; this way they show up
        # as a string or object array and are refused below.
        matrix = np.asarray(rows)
    except ValueError:
        raise ModelError("the embeddings are not rows of one length") from None
    if matrix.ndim != 2 or matrix.dtype.kind not in "iuf":
        raise ModelError("the embeddings are not lists of numbers")
    if not 1 <= matrix.shape[1] <= MAX_MODEL_DIM:
        raise ModelError(f"the embeddings have {matrix.shape[1]} dimensions, outside 1..{MAX_MODEL_DIM}")
    values = matrix.astype(np.float64)
    if not (np.isfinite(values).all() and np.abs(values).max() <= _FLOAT32_MAX):
        raise ModelError("the embeddings hold numbers that are not finite float32")
    return unit(values)


def load_embedder(model_url: str | None, model_name: str | None, *, api_key: str | None = None,
                  batch_size: int = DEFAULT_BATCH_SIZE) -> Embedder:
    """The configured embedder: a model's when both its URL and name are set, else the hashed one.

    One without the other is a configuration mistake and raises ``ValueError``, as does a
    malformed URL: configuration errors are loud, only the model's failures are soft.
    """
    if model_url is None and model_name is None:
        return HashedEmbedder()
    if model_url is None or model_name is None:
        raise ValueError("an embedding model needs both its URL and its name")
    return ModelEmbedder(Endpoint(model_url, model_name, api_key=api_key), batch_size=batch_size)


def _checked(texts: Sequence[str]) -> Sequence[str]:
    # A str is a Sequence[str] too: embedding its characters one by one is never meant.
    if isinstance(texts, str):
        raise TypeError("embed takes a sequence of texts, not one str")
    return texts


def unit(vectors: npt.ArrayLike) -> FloatArray:
    """``vectors`` scaled to unit L2 norm along the last axis, as float32; zero rows stay zero."""
    values = np.asarray(vectors, dtype=np.float64)
    # einsum: a third faster than square-sum-divide on one row, half on a thousand.
    norms = np.sqrt(np.einsum("...i,...i->...", values, values))[..., np.newaxis]
    norms[norms == 0.0] = 1.0  # a zero row divided by 1 stays zero
    scaled: npt.NDArray[np.float64] = values / norms
    return scaled.astype(np.float32)


def cosine(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """The cosine of two vectors of one shape; 0.0 when either is zero."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"cosine needs two vectors of one length, not shapes {x.shape} and {y.shape}")
    denominator = float(np.sqrt(np.dot(x, x) * np.dot(y, y)))
    if denominator == 0.0:
        return 0.0
    return max(-1.0, min(1.0, float(np.dot(x, y)) / denominator))


# Stored vectors.  A hashed vector has a few dozen non-zero entries out of 256, so it is
# stored sparse, as packed (uint8 index, float32 value) entries of 5 bytes; any other
# vector is stored dense as float32.  A dense blob's length is a multiple of 4; a sparse
# one is made never to be (when the entry count is a multiple of 4, its last entry is
# written twice: assigning it twice changes nothing), so the length alone tells them
# apart, and decoding many sparse blobs is one join and one scatter.  Small blobs keep
# the episodes table narrow, which is what makes recall over 10 000 rows fast.
_SPARSE_FIELDS: Final = [("i", "u1"), ("v", "<f4")]  # packed: 5 bytes


@functools.cache
def _sparse_entry() -> np.dtype[Any]:
    return np.dtype(_SPARSE_FIELDS)  # made on first use: numpy is imported lazily


def to_blob(vector: npt.ArrayLike) -> bytes:
    """A vector as bytes for the store, identical on every machine (little-endian float32)."""
    values = np.asarray(vector, dtype="<f4")
    if values.ndim != 1:
        raise ValueError(f"to_blob takes one vector, not shape {values.shape}")
    if values.shape[0] == DIM:
        nonzero = np.flatnonzero(values)
        if len(nonzero) % 4 == 0:
            # Repeat the last entry (or write index 0 = 0.0 for a zero vector).
            nonzero = np.append(nonzero, nonzero[-1] if len(nonzero) else 0)
        if 5 * len(nonzero) < 4 * DIM:
            entries = np.empty(len(nonzero), dtype=_sparse_entry())
            entries["i"] = nonzero
            entries["v"] = values[nonzero]
            return entries.tobytes()
    return values.tobytes()


def to_blobs(vectors: npt.ArrayLike) -> list[bytes]:
    """``to_blob`` of each row of an n × DIM matrix, the same bytes, in a few vectorised steps: a receive
    stores a whole batch's new lessons, and one call a row cost 13 µs of the receiving thread's time."""
    values = np.asarray(vectors, dtype="<f4")
    if values.ndim != 2 or values.shape[1] != DIM:
        raise ValueError(f"to_blobs takes rows of {DIM} numbers, not shape {values.shape}")
    nonzero = values != 0  # NaN counts, as in np.flatnonzero
    counts = nonzero.sum(axis=1)
    lengths = counts + (counts % 4 == 0)  # the last entry written twice, or index 0 for a zero vector
    sparse = 5 * lengths < 4 * DIM
    out: list[bytes] = [b""] * len(values)
    for row in np.flatnonzero(~sparse).tolist():
        out[row] = values[row].tobytes()
    rows = np.flatnonzero(sparse)
    if not len(rows):
        return out
    counts, lengths = counts[rows], lengths[rows]
    ends = np.cumsum(lengths)
    starts = ends - lengths
    entries = np.zeros(int(ends[-1]), dtype=_sparse_entry())
    owner, dims = np.nonzero(nonzero[rows])  # by row, then ascending dimension
    first = np.cumsum(counts) - counts  # where each row's entries begin in ``dims``
    at = starts[owner] + np.arange(len(dims)) - first[owner]
    entries["i"][at] = dims
    entries["v"][at] = values[rows[owner], dims]
    twice = np.flatnonzero((counts % 4 == 0) & (counts > 0))  # a row's last entry again
    last = first[twice] + counts[twice] - 1
    entries["i"][starts[twice] + counts[twice]] = dims[last]
    entries["v"][starts[twice] + counts[twice]] = values[rows[twice], dims[last]]
    data = entries.tobytes()  # a zero vector's one entry is index 0 = 0.0, as np.zeros left it
    for row, start, end in zip(rows.tolist(), (5 * starts).tolist(), (5 * ends).tolist(), strict=True):
        out[row] = data[start:end]
    return out


def from_blob(blob: bytes) -> FloatArray:
    """The vector stored by ``to_blob``, as a writable native float32 array."""
    if len(blob) % 4 == 0:
        return np.frombuffer(blob, dtype="<f4").astype(np.float32)
    vector: FloatArray = stack([blob], DIM)[0]
    return vector


def stack(blobs: Sequence[bytes], dim: int, *, spare_rows: int = 0) -> FloatArray:
    """Many stored vectors as one n × dim matrix, decoded in a few vectorised steps; ``spare_rows``
    zero rows after them (room for a ``VectorRows`` to grow into without a copy).

    A dense blob must hold exactly ``dim`` float32 numbers and a sparse one only indexes
    below ``dim``: anything else raises ``ValueError``, rather than shifting rows.
    """
    out = np.zeros((len(blobs) + spare_rows, dim), dtype=np.float32)
    if not blobs:
        return out
    lengths = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs))
    sparse = lengths % 4 != 0
    if not sparse.all():
        dense_rows = np.flatnonzero(~sparse)
        wrong = dense_rows[lengths[dense_rows] != 4 * dim]
        if len(wrong):
            raise ValueError(f"blob {int(wrong[0])} has {int(lengths[wrong[0]])} bytes, not {4 * dim} "
                             f"({dim} float32 numbers)")
        dense_blobs = [b for b, s in zip(blobs, sparse.tolist(), strict=True) if not s]
        out[dense_rows] = np.frombuffer(b"".join(dense_blobs), dtype="<f4").reshape(-1, dim)
    if sparse.any():
        sparse_rows = np.flatnonzero(sparse)
        if (lengths[sparse_rows] % 5).any():
            raise ValueError("a sparse blob is not a whole number of entries")
        sparse_blobs = blobs if sparse.all() else [b for b, s in zip(blobs, sparse.tolist(), strict=True) if s]
        entries = np.frombuffer(b"".join(sparse_blobs), dtype=_sparse_entry())
        if len(entries) and int(entries["i"].max()) >= dim:
            raise ValueError(f"a sparse blob indexes beyond {dim} dimensions")
        out[np.repeat(sparse_rows, lengths[sparse_rows] // 5), entries["i"]] = entries["v"]
    return out


class VectorRows:
    """A growable matrix of row vectors with ids: appending is amortised O(1), so a pass that
    compares each new item with everything before it never re-stacks the whole matrix."""

    def __init__(self, dim: int, ids: Sequence[Any] = (), rows: FloatArray | None = None) -> None:
        """Empty, or holding the first len(ids) rows of ``rows`` (float32, taken as it is, the rows after
        them room to grow into) with their ``ids``."""
        self.ids: list[Any] = list(ids)
        if rows is None or not len(self.ids):
            self.ids = []
            self._data = np.zeros((64, dim), dtype=np.float32)
        else:
            assert rows.dtype == np.float32 and rows.shape[1] == dim and len(rows) >= len(self.ids)
            self._data = rows

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def matrix(self) -> FloatArray:
        return self._data[: len(self.ids)]

    def add(self, row_id: Any, vector: FloatArray) -> None:
        held = len(self.ids)
        if held == len(self._data):
            # A quarter more room (64 rows at least): still amortised O(1), and a matrix read from the store
            # (20 MB at 20 000 lessons) costs 2.25 times its size while it grows, not 4 (old, zeros, doubled).
            grown = np.empty((held + max(64, held // 4), self._data.shape[1]), dtype=np.float32)
            grown[:held] = self._data
            self._data = grown
        self._data[held] = vector
        self.ids.append(row_id)

    def set(self, index: int, vector: FloatArray) -> None:
        self._data[index] = vector

    def remove(self, index: int) -> None:
        last = len(self.ids) - 1
        self._data[index] = self._data[last]
        self.ids[index] = self.ids[last]
        self.ids.pop()
