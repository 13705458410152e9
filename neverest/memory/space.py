"""The names and size of the embedding spaces, apart from the embedder that computes vectors in them.

The SQL that reads stored vectors (``queries.lessons``) needs the hashed space's size, not numpy or the
model client that ``embed`` loads: keeping these here lets a command list lessons without either.
"""

from __future__ import annotations

from typing import Final

HASHED_SPACE: Final = "hashed-256"
DIM: Final = 256  # the hashed space's dimensions; a stored sparse vector (embed.to_blob) is in it
MODEL_SPACE_PREFIX: Final = "model:"
