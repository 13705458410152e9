"""The refutation record's wire vectors (tests/vectors/refutations.jsonl): each one parsed as its line
says, accepted lines re-signed byte for byte, and the file reproduced by the script that writes it."""

from __future__ import annotations

import json
from typing import Any

import nacl.signing
import pytest

from neverest.records import RecordError, canonical, parse, sign_refute
from tests.conftest import VECTORS
from tests.vectors import make_refutations

CASES = [json.loads(line) for line in (VECTORS / "refutations.jsonl").read_text(encoding="utf-8").splitlines()
         if line]
KEYS = {case["key"]: nacl.signing.SigningKey(bytes.fromhex(case["seed_hex"]))
        for case in json.loads((VECTORS / "identities.json").read_text())["keys"]}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_refutation_vector(case: dict[str, Any]) -> None:
    if case["expect"] == "accept":
        assert case["code"] is None
        record = parse(case["line"])
        fields = json.loads(case["line"])
        assert record.raw == case["line"].encode("utf-8")
        assert (record.type, record.target, record.origin, record.seq) == (
            "refute", fields["refute"], fields["origin"], fields.get("seq"))
    else:
        with pytest.raises(RecordError) as err:
            parse(case["line"])
        assert err.value.code == case["code"], err.value.message


@pytest.mark.parametrize("case", [c for c in CASES if c["expect"] == "accept"], ids=lambda c: c["name"])
def test_an_accepted_refutation_re_signed_is_the_same_line(case: dict[str, Any]) -> None:
    fields = json.loads(case["line"])
    key = KEYS[fields["key"]]
    body = {k: v for k, v in fields.items() if k != "sig"}
    assert canonical(body | {"sig": key.sign(canonical(body)).signature.hex()}) == case["line"].encode("utf-8")
    if set(body) <= {"v", "key", "origin", "refute", "at", "seq"}:
        # No extension field: the daemon's own signer writes exactly this line.
        again = sign_refute(key, fields["refute"], at=fields["at"], seq=fields.get("seq"))
        assert again.raw == case["line"].encode("utf-8")


def test_the_script_reproduces_the_file() -> None:
    assert make_refutations.text() == (VECTORS / "refutations.jsonl").read_text(encoding="utf-8")
    assert make_refutations.main(["--check"]) == 0


def test_the_vectors_cover_every_case_the_protocol_names() -> None:
    by_name = {c["name"]: c for c in CASES}
    assert {"refute-basic", "refute-with-seq", "refute-unknown-field-kept", "refute-bad-hash", "refute-and-confirm",
            "refute-at-without-zone", "refute-forged-signature", "refute-origin-mismatch",
            "refute-re-spaced"} <= set(by_name)
    assert {c["expect"] for c in CASES} == {"accept", "refuse"}
    # The forged one differs from refute-basic only by its signature: the fault is the signature alone.
    basic, forged = json.loads(by_name["refute-basic"]["line"]), json.loads(by_name["refute-forged-signature"]["line"])
    assert {k for k in basic if basic[k] != forged[k]} == {"sig"}
