"""Layers (a union with the strongest instance of a duplicate) and the trust policy."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import nacl.signing

from neverest.clock import iso
from neverest.config import Config
from neverest.memory import views
from neverest.memory.receive import receive
from neverest.memory.states import verdict
from neverest.memory.store import open_store
from neverest.records import lesson_hash, origin_of, sign_confirm, sign_lesson

NOW = datetime(2026, 4, 1, tzinfo=UTC)
KEYS = [nacl.signing.SigningKey(bytes([i]) * 32) for i in range(10, 16)]
ORIGINS = [origin_of(bytes(k.verify_key)) for k in KEYS]
TEXT = "npm ci fails behind the proxy"
HASH = lesson_hash("error", TEXT)


def lesson(i: int, text: str = TEXT) -> bytes:
    return sign_lesson(KEYS[i], kind="error", text=text, seen=1, strength=1.0, updated=iso(NOW), seq=1).raw


def test_the_agents_view_is_the_union_with_the_strongest_duplicate(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    config = Config()._replace(domain_origins=ORIGINS[1])
    receive(store, [lesson(0), lesson(1, "tsc reports a stale schema after a rebase")], source="t",
            own_origin="f" * 16, config=config, now=NOW)
    layers = dict(store.db.execute("SELECT text, layer FROM lessons"))
    assert layers == {TEXT: "common", "tsc reports a stale schema after a rebase": "domain"}
    # This memory learns the same sentence itself: a personal row, stronger than the candidate.
    with store.write() as db:
        db.execute("INSERT INTO lessons (hash, kind, text, strength, seen, created, updated) "
                   "VALUES (?, 'error', ?, 1.5, 2, ?, ?)", (HASH, TEXT, iso(NOW), iso(NOW)))
    view = views.strongest(views.load(store.db, now=NOW, config=config, own_origin="f" * 16))
    assert [(v.text, v.layer) for v in view if v.hash == HASH] == [(TEXT, "personal")]
    assert len(view) == 2
    # A later record from the common layer raises support but never edits the personal row.
    receive(store, [lesson(2)], source="t", own_origin="f" * 16, config=config, now=NOW)
    personal = store.db.execute("SELECT text, kind, seen FROM lessons WHERE origin = ''").fetchone()
    assert personal == (TEXT, "error", 2)


def test_the_peers_policy_counts_only_known_origins(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    own = "f" * 16
    records = [lesson(0)] + [sign_confirm(KEYS[i], HASH, at=iso(NOW)).raw for i in (1, 2, 3)]
    everyone = Config(trust="any")  # the contrast: under "any" the three confirmations make it common
    receive(store, records, source="t", own_origin=own, config=everyone, now=NOW)
    assert verdict(store.db, HASH, now=NOW, config=everyone, own_origin=own).state == "common"
    peers = everyone._replace(trust="peers")
    with store.write() as db:
        db.execute("INSERT INTO peers (origin, source) VALUES (?, 'manual')", (ORIGINS[1],))
    v = verdict(store.db, HASH, now=NOW, config=peers, own_origin=own)
    assert (v.state, v.support) == ("candidate", 1)
    allow = peers._replace(trust_allow=f"{ORIGINS[2]},{ORIGINS[3]}")
    assert verdict(store.db, HASH, now=NOW, config=allow, own_origin=own).state == "common"
