"""The shared wire-format vectors (tests/vectors, the project's pinned wire vectors) must all pass."""

from __future__ import annotations

import json

import nacl.signing
import pytest

from neverest.records import RecordError, lesson_hash, norm, origin_of, parse
from tests.conftest import VECTORS

IDENTITIES = json.loads((VECTORS / "identities.json").read_text())
RECORDS = [json.loads(line) for line in (VECTORS / "records.jsonl").read_text().splitlines() if line]

# The reason each refused vector must be refused for.  The vectors only say
# "refuse"; pinning the code keeps a check from passing for the wrong reason.
EXPECTED_CODE = {
    "lesson-text-changed-after-signing": "hash-mismatch",
    "lesson-seen-changed-after-signing": "bad-signature",
    "lesson-origin-not-key-fingerprint": "origin-mismatch",
    "lesson-hash-mismatch": "hash-mismatch",
    "lesson-imperative": "imperative",
    "lesson-imperative-2": "imperative",
    "lesson-bad-kind": "bad-kind",
    "lesson-seen-zero": "bad-field",
    "lesson-seen-float": "bad-field",
    "not-json": "not-json",
    "json-array": "not-object",
    "confirm-bad-target": "bad-field",
    "lesson-unsigned": "bad-signature",
    "lesson-not-canonical-bytes": "bad-signature",
    "lesson-sig-moved-to-front": "bad-signature",
    "lesson-sig-moved-to-middle": "bad-signature",
    "lesson-duplicate-key-spaced": "duplicate-key",
    "lesson-duplicate-key-escaped": "duplicate-key",
}


@pytest.mark.parametrize("case", IDENTITIES["hashes"], ids=lambda c: c["hash"])
def test_norm_and_hash(case: dict[str, str]) -> None:
    assert norm(case["text"]) == case["norm"]
    assert lesson_hash(case["kind"], case["text"]) == case["hash"]


@pytest.mark.parametrize("case", IDENTITIES["keys"], ids=lambda c: c["origin"])
def test_key_and_origin(case: dict[str, str]) -> None:
    key = nacl.signing.SigningKey(bytes.fromhex(case["seed_hex"])).verify_key
    assert bytes(key).hex() == case["key"]
    assert origin_of(bytes(key)) == case["origin"]


@pytest.mark.parametrize("case", RECORDS, ids=lambda c: c["name"])
def test_record_vector(case: dict[str, str]) -> None:
    if case["expect"] == "accept":
        record = parse(case["line"])
        assert record.raw == case["line"].encode("utf-8")
        fields = json.loads(case["line"])
        assert record.origin == fields["origin"]
        assert record.target == (fields.get("hash") or fields.get("confirm") or fields.get("revoke"))
    else:
        with pytest.raises(RecordError) as err:
            parse(case["line"])
        assert err.value.code == EXPECTED_CODE[case["name"]], err.value.message


def test_every_refused_vector_has_an_expected_code() -> None:
    refused = {c["name"] for c in RECORDS if c["expect"] == "refuse"}
    assert refused == set(EXPECTED_CODE)


def test_the_forged_fork_and_hidden_duplicate_vectors_are_loaded() -> None:
    # The vectors of issue 11: guard against their being dropped from the file by a re-copy.
    names = {c["name"] for c in RECORDS}
    assert {"lesson-sig-moved-to-front", "lesson-sig-moved-to-middle", "lesson-duplicate-key-spaced",
            "lesson-duplicate-key-escaped"} <= names
