"""Refutations and the HTTP commons: this commons server takes them; one older than the record type
refuses a whole file holding one, and the client then pushes once more without its refutations."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import httpx

from neverest.clock import iso
from neverest.identity import Identity
from neverest.memory import holdings
from neverest.memory.store import Store, open_store
from neverest.records import lesson_hash, sign_confirm, sign_lesson, sign_refute
from neverest.transports import commons_client
from neverest.transports.commons_protocol import first_bad_line, record_lines

NOW = datetime(2026, 4, 1, 12, tzinfo=UTC)
TOKEN = "test-token-0123456789"


def old_commons(pushed: list[bytes]) -> httpx.MockTransport:
    """The PUT contract of a commons from before refutations: a line that is not exactly one of a lesson
    (``hash``), a confirmation or a revocation refuses the whole file, 422 ``bad-type`` at that line."""
    def handle(request: httpx.Request) -> httpx.Response:
        body = request.read()
        for number, line in enumerate(body.split(b"\n"), start=1):
            if line and sum(name in json.loads(line) for name in ("hash", "confirm", "revoke")) != 1:
                return httpx.Response(422, json={"error": "bad-record", "message": f"line {number}: bad-type: ...",
                                                 "line": number, "reason": "bad-type"})
        pushed.append(body)
        return httpx.Response(201, json={}, headers={"etag": '"v1"'})
    return httpx.MockTransport(handle)


def own_records(tmp_path: Path) -> tuple[Identity, Store]:
    identity = Identity.from_seed(b"\x05" * 32)
    store = open_store(tmp_path)
    other = lesson_hash("error", "someone else's lesson")
    with store.write() as db:
        for record in (sign_lesson(identity.signing_key, kind="error", text="make check hangs on the network tests",
                                   seen=2, strength=1.0, updated=iso(NOW), seq=1),
                       sign_refute(identity.signing_key, other, at=iso(NOW), seq=2),
                       sign_confirm(identity.signing_key, lesson_hash("error", "a third lesson"), at=iso(NOW), seq=3)):
            holdings.put(db, record, source=holdings.OWN_SOURCE, now=NOW)
    return identity, store


def test_an_older_commons_gets_the_file_without_refutations(tmp_path: Path) -> None:
    identity, store = own_records(tmp_path)
    pushed: list[bytes] = []
    out = commons_client.push(store, identity, "http://c.invalid", TOKEN,
                              transport=old_commons(pushed))
    assert out["records"] == 2 and out["refutations_left_out"] == 1
    [body] = pushed
    assert [json.loads(line).get("seq") for line in body.splitlines()] == [1, 3]


def test_this_commons_takes_a_file_with_refutations(tmp_path: Path) -> None:
    identity, store = own_records(tmp_path)
    body, count = commons_client.own_file(store, identity)
    assert count == 3
    assert first_bad_line(identity.origin, record_lines(body)) is None


def test_any_other_refusal_is_not_retried(tmp_path: Path) -> None:
    identity, store = own_records(tmp_path)
    puts = []

    def refuse(request: httpx.Request) -> httpx.Response:
        puts.append(request)
        return httpx.Response(422, json={"error": "bad-record", "message": "line 1: bad-signature: ...", "line": 1,
                                         "reason": "bad-signature"})

    try:
        commons_client.push(store, identity, "http://c.invalid", TOKEN,
                            transport=httpx.MockTransport(refuse))
    except commons_client.CommonsRefused as exc:
        assert exc.status == 422 and exc.reason == "bad-signature"
    else:
        raise AssertionError("a refused push must raise")
    assert len(puts) == 1
