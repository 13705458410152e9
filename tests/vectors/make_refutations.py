"""Writes tests/vectors/refutations.jsonl, the wire vectors of the refutation record (PROTOCOL.md §1).

    .venv/bin/python tests/vectors/make_refutations.py        # rewrites the file
    .venv/bin/python tests/vectors/make_refutations.py --check  # exit 1 if the file differs

Deterministic: Ed25519 signatures are (RFC 8032), the keys are the seeds of identities.json, and every
time and hash is written here, so the file comes out byte for byte the same on every machine.  Each
line is ``{"name", "line", "expect", "code", "why"}`` as in records.jsonl, plus ``code``: the refusal
code a refused line must get (null for accepted ones).  tests/test_refute_vectors.py checks every line
with ``records.parse`` and that this script reproduces the file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import nacl.signing

from neverest.records import canonical, origin_of

HERE = Path(__file__).parent
OUT = HERE / "refutations.jsonl"
_KEYS = json.loads((HERE / "identities.json").read_text(encoding="utf-8"))["keys"]
PUBLISHER = nacl.signing.SigningKey(bytes.fromhex(_KEYS[0]["seed_hex"]))  # signed lesson-basic
REFUTER = nacl.signing.SigningKey(bytes.fromhex(_KEYS[1]["seed_hex"]))
# The hash of lesson-basic in records.jsonl ("pip install in this repository fails without ...").
TARGET = "ba896333b95ec98c908f0919911edfb5"
AT = "2026-11-21T03:00:00.000000Z"


def _who(key: nacl.signing.SigningKey) -> dict[str, Any]:
    public = bytes(key.verify_key)
    return {"v": 1, "key": public.hex(), "origin": origin_of(public)}


def signed(key: nacl.signing.SigningKey, fields: dict[str, Any]) -> str:
    """``fields`` signed by ``key`` as they are, in the canonical form: no field is added or checked,
    so that a vector can carry exactly the fault it is about."""
    body = {k: v for k, v in fields.items() if k != "sig"}
    return canonical(body | {"sig": key.sign(canonical(body)).signature.hex()}).decode("utf-8")


def refutation(key: nacl.signing.SigningKey = REFUTER, **extra: Any) -> dict[str, Any]:
    return _who(key) | {"refute": TARGET, "at": AT} | extra


def _case(name: str, line: str, expect: str, code: str | None, why: str) -> dict[str, Any]:
    return {"name": name, "line": line, "expect": expect, "code": code, "why": why}


def cases() -> list[dict[str, Any]]:
    plain = signed(REFUTER, refutation())
    forged = json.loads(plain)
    forged["sig"] = PUBLISHER.sign(canonical(refutation())).signature.hex()  # another key, the same bytes
    tampered = json.loads(plain)
    tampered["at"] = "2026-11-22T03:00:00.000000Z"
    mismatch = refutation() | {"origin": origin_of(bytes(PUBLISHER.verify_key))}
    return [
        _case("refute-basic", plain, "accept", None,
              "a memory whose own sessions met lesson-basic's situation, and it did not hold"),
        _case("refute-with-seq", signed(REFUTER, refutation(seq=7)), "accept", None,
              "the seq extension, as gossip carries it"),
        _case("refute-unknown-field-kept", signed(REFUTER, refutation(seq=8, note="kept and relayed")), "accept",
              None, "readers ignore unknown fields, which the signature still covers"),
        _case("refute-by-publisher", signed(PUBLISHER, refutation(PUBLISHER, seq=3)), "accept", None,
              "valid on the wire; a receiver holding the publisher's lesson refuses it (refute-publisher), "
              "and the trust rule ignores a publisher's refutation of its own lesson"),
        _case("refute-bad-hash", signed(REFUTER, refutation(refute=TARGET.upper())), "refuse", "bad-field",
              "the lesson hash is 32 lower-case hex digits"),
        _case("refute-short-hash", signed(REFUTER, refutation(refute=TARGET[:31])), "refuse", "bad-field",
              "the lesson hash is 32 lower-case hex digits"),
        _case("refute-and-confirm", signed(REFUTER, refutation(confirm=TARGET)), "refuse", "bad-type",
              "a record is exactly one type: refute and confirm together are neither"),
        _case("refute-and-hash", signed(REFUTER, refutation(hash=TARGET)), "refuse", "bad-type",
              "a record is exactly one type: a lesson's hash field makes it two"),
        _case("refute-at-without-zone", signed(REFUTER, refutation(at="2026-11-21T03:00:00")), "refuse", "bad-field",
              "at is an ISO 8601 time with a zone"),
        _case("refute-at-not-a-time", signed(REFUTER, refutation(at="yesterday")), "refuse", "bad-field",
              "at is an ISO 8601 time"),
        _case("refute-at-missing", signed(REFUTER, {k: v for k, v in refutation().items() if k != "at"}),
              "refuse", "bad-field", "a refutation carries the time it was signed"),
        _case("refute-seq-zero", signed(REFUTER, refutation(seq=0)), "refuse", "bad-field",
              "seq is a positive integer"),
        _case("refute-forged-signature", canonical(forged).decode("utf-8"), "refuse", "bad-signature",
              "signed by another key than the one it names"),
        _case("refute-changed-after-signing", canonical(tampered).decode("utf-8"), "refuse", "bad-signature",
              "at changed after signing: the signature no longer covers the bytes"),
        _case("refute-unsigned", canonical(refutation()).decode("utf-8"), "refuse", "bad-signature",
              "no signature"),
        _case("refute-origin-mismatch", signed(REFUTER, mismatch), "refuse", "origin-mismatch",
              "origin must be the fingerprint of key"),
        _case("refute-re-spaced", json.dumps(json.loads(plain), sort_keys=True), "refuse", "bad-signature",
              "the signature covers the exact canonical bytes; a re-spaced line does not verify"),
        _case("refute-bad-version", signed(REFUTER, refutation(v=2)), "refuse", "bad-version",
              "v is the integer 1"),
    ]


def text() -> str:
    return "".join(json.dumps(case, ensure_ascii=False) + "\n" for case in cases())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--check"]:
        return 0 if OUT.read_text(encoding="utf-8") == text() else 1
    if args:
        print("usage: make_refutations.py [--check]", file=sys.stderr)
        return 2
    OUT.write_text(text(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
