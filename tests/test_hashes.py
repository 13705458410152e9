"""neverest.hashes gives hashlib's digests (it only avoids loading OpenSSL's bindings)."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from neverest import hashes


@given(st.binary(max_size=300), st.integers(min_value=1, max_value=64), st.binary(max_size=16))
def test_blake2b_is_hashlibs(data: bytes, size: int, person: bytes) -> None:
    assert (hashes.blake2b(data, digest_size=size, person=person).hexdigest()
            == hashlib.blake2b(data, digest_size=size, person=person).hexdigest())


@given(st.binary(max_size=300))
def test_sha256_is_hashlibs(data: bytes) -> None:
    assert hashes.sha256(data).digest() == hashlib.sha256(data).digest()
