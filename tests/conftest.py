"""Shared test helpers: deterministic identities from the wire vectors."""

from __future__ import annotations

import json
from pathlib import Path

import nacl.signing
import pytest

VECTORS = Path(__file__).parent / "vectors"


def vector_identities() -> list[dict[str, str]]:
    return list(json.loads((VECTORS / "identities.json").read_text())["keys"])


@pytest.fixture
def signing_key() -> nacl.signing.SigningKey:
    """The first deterministic identity of the vectors (origin 34750f98bd59fcfc)."""
    return nacl.signing.SigningKey(bytes.fromhex(vector_identities()[0]["seed_hex"]))


@pytest.fixture
def other_key() -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey(bytes.fromhex(vector_identities()[1]["seed_hex"]))
