"""What a verifying process does for the receive path (``verify_pool.JOBS["receive-batch"]``).

``verify_batch`` takes a batch of record lines and returns, in plain data, each line's verdict
and the hashed-space vectors of the lessons among them: the two CPU-bound steps of receiving
that need nothing of the store, done on another core while the receiver stores the batch
before.  The receiver (``memory.receive``) checks the shape of what comes back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neverest.memory.embed import HashedEmbedder
from neverest.records import RecordError, parse_many


def verify_batch(lines: list[bytes | None]) -> list[Any]:
    """``[verdicts, vectors]``: per line ``None`` (a valid record) or ``[reason, message]``;
    ``vectors`` the float32 rows (bytes, 256 per row) of the valid lessons, in line order."""
    verdicts: list[list[str] | None] = []
    texts: list[str] = []
    for _, item in parse_many((None, line) for line in lines):
        if isinstance(item, RecordError):
            verdicts.append([item.code, item.message])
            continue
        verdicts.append(None)
        if item.type == "lesson":
            texts.append(item.fields["text"])
    vectors = HashedEmbedder().embed(texts) if texts else np.zeros((0,), np.float32)
    return [verdicts, np.ascontiguousarray(vectors, dtype="<f4").tobytes()]
