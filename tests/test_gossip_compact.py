"""Gossip revision 3, the compact reconciliation (issue 26; PROTOCOL.md §11): 4-byte child
fingerprints and envelopes without "o"/"to" once both sides said they speak it, interworking
with revision-2 peers either way; and its pinned vectors (tests/vectors/gossip_compact.json,
regenerated with ``python -m tests.test_gossip_compact``; the revision-2 file is unchanged)."""

from __future__ import annotations

import json
import random
from typing import Any

import msgpack
import pytest

from neverest.gossip import codec, peer_auth
from neverest.gossip.codec import (
    CHILD_FP_BYTES,
    CHILD_FP_BYTES_COMPACT,
    COMPACT,
    InSync,
    Items,
    MessageType,
    ProtocolError,
    Recon,
    Split,
    Sync,
)
from neverest.gossip.core import Settings
from neverest.gossip.ranges import RangeIndex
from tests.conftest import VECTORS
from tests.test_gossip_recon import A, B, exchange, same, shared, synthetic
from tests.test_gossip_recon_vectors import ENTRIES, SEEDS, TS, _digest, _key, _origin, body_of, meaning

PATH = VECTORS / "gossip_compact.json"
R2 = Settings(compact=False)


def _splits(wire: list[bytes]) -> list[int]:
    """The child-fingerprint widths of every split sent."""
    out = []
    for data in wire:
        envelope = codec.decode(data)
        body = codec.decode_body(envelope.type, envelope.body)
        if isinstance(body, Recon):
            out += [n.width for n in body.nodes if isinstance(n, Split)]
    return out


@pytest.mark.parametrize(("initiator", "responder", "compact"), [
    (None, None, True), (R2, None, False), (None, R2, False), (R2, R2, False)])
@pytest.mark.parametrize("side", ["pull", "push", "both"])
def test_revisions_2_and_3_reconcile_with_each_other(initiator: Settings | None, responder: Settings | None,
                                                      compact: bool, side: str) -> None:
    a, b, _ = shared(3000, seed=5)
    chance = random.Random(6)
    for i in range(6):
        origin = f"{chance.getrandbits(64):016x}"
        holder = {"pull": b, "push": a}.get(side) or (a if i % 2 else b)
        holder.put(synthetic(origin, 1))
    wire: list[bytes] = []
    result = exchange(a, b, initiator=initiator, responder=responder, wire=wire)
    assert result.error is None and same(a, b) and result.round_trips <= 3
    sync = codec.decode(wire[0])
    assert sync.type is MessageType.SYNC and not sync.auth.compact  # the first contact is always whole
    body = codec.decode_body(sync.type, sync.body)
    assert isinstance(body, Sync) and body.revision == (2 if initiator is R2 else COMPACT)
    assert [codec.decode(m).auth.compact for m in wire[1:]] == [compact] * (len(wire) - 1)
    assert set(_splits(wire)) == {CHILD_FP_BYTES_COMPACT if compact else CHILD_FP_BYTES}
    assert exchange(a, b, initiator=initiator, responder=responder).in_sync


def test_revision_3_costs_less_than_revision_2_for_one_difference() -> None:
    sizes = {}
    for label, settings in (("r3", Settings()), ("r2", R2)):
        a, b, _ = shared(10_000, seed=7)
        b.put(synthetic("0123456789abcdef", 1))
        result = exchange(a, b, initiator=settings, responder=settings)
        assert result.error is None and same(a, b)
        sizes[label] = result.bytes_sent + result.bytes_received
    # Issue 26: 1 difference among 10^4 ≤ 1.5 KB besides the record (383 bytes with its framing).
    assert sizes["r3"] - 383 <= 1536 < sizes["r2"] - 383, sizes


def test_a_compact_message_names_neither_origin_and_is_signed_over_both() -> None:
    body = codec.encode_body(Recon())
    auth = peer_auth.sign(_key("a"), MessageType.RECON, body, to=_origin("b"), ts=TS, nonce=b"\x01" * 16,
                          compact=True)
    data = codec.encode(MessageType.RECON, auth, body)
    raw = msgpack.unpackb(data)
    assert set(raw["a"]) == {"k", "ts", "n", "s"}
    envelope = codec.decode(data)
    assert envelope.auth.compact and envelope.auth.origin == _origin("a")
    peer_auth.verify(envelope.auth, envelope.type, envelope.body, me=_origin("b"), now_s=TS, skew_s=None)
    # Carried to another memory, the signature (over the origin addressed) does not verify.
    with pytest.raises(ProtocolError) as refused:
        peer_auth.verify(envelope.auth, envelope.type, envelope.body, me=A, now_s=TS, skew_s=None)
    assert refused.value.code == "bad-signature"
    # Nor does it with a key swapped in: the origin is the key's, the signature another's.
    swapped = dict(raw, a=dict(raw["a"], k=bytes(_key("b").verify_key)))
    forged = codec.decode(msgpack.packb(swapped))
    with pytest.raises(ProtocolError) as refused:
        peer_auth.verify(forged.auth, forged.type, forged.body, me=_origin("b"), now_s=TS, skew_s=None)
    assert refused.value.code == "bad-signature"


@pytest.mark.parametrize("mtype", [MessageType.SYNC, MessageType.REFUSED, MessageType.PUSH, MessageType.DIGEST])
def test_only_recon_and_in_sync_may_come_compact(mtype: MessageType) -> None:
    body = b"\x80"
    auth = peer_auth.sign(_key("a"), mtype, body, to=B, ts=TS, nonce=b"\x02" * 16)
    raw = {"v": 1, "t": int(mtype), "a": {"k": auth.key, "ts": auth.ts, "n": auth.nonce, "s": auth.sig}, "b": body}
    with pytest.raises(ProtocolError) as refused:
        codec.decode(msgpack.packb(raw))
    assert refused.value.code == "bad-field"
    with pytest.raises(ProtocolError):
        codec.encode(mtype, peer_auth.sign(_key("a"), mtype, body, to=B, ts=TS, nonce=b"\x02" * 16, compact=True),
                     body)
    # Half compact (one of "o"/"to" left out) is refused whatever the type.
    half = {"v": 1, "t": 7, "a": {"o": bytes.fromhex(A), "k": auth.key, "ts": 1, "n": auth.nonce, "s": auth.sig},
            "b": body}
    with pytest.raises(ProtocolError):
        codec.decode(msgpack.packb(half))


@pytest.mark.parametrize("width", [0, 1, 2, 3, 5, 6, 7, 9, 16])
def test_a_split_of_another_width_is_refused(width: int) -> None:
    body = msgpack.packb({"n": [[0, 0, 2, b"\x00" * (width << 2)]]})
    with pytest.raises(ProtocolError) as refused:
        codec.decode_body(MessageType.RECON, body)
    assert refused.value.code == "bad-field"


@pytest.mark.parametrize("width", [CHILD_FP_BYTES_COMPACT, CHILD_FP_BYTES])
def test_both_widths_decode(width: int) -> None:
    body = codec.decode_body(MessageType.RECON, msgpack.packb({"n": [[3, 5, 2, b"\x07" * (width << 2)]]}))
    assert isinstance(body, Recon) and isinstance(body.nodes[0], Split) and body.nodes[0].width == width


# -- vectors -----------------------------------------------------------------------------------

def _meaning(body: codec.Body) -> dict[str, Any]:
    return {} if isinstance(body, InSync) else meaning(body)


def _body_of(mtype: str, data: dict[str, Any]) -> codec.Body:
    return InSync() if mtype == "IN_SYNC" else body_of(mtype, data)


def seal(vector: dict[str, Any]) -> bytes:
    body = codec.encode_body(_body_of(vector["type"], vector["body"]))
    mtype = MessageType[vector["type"]]
    auth = peer_auth.sign(_key(vector["from"]), mtype, body, to=vector["to"], ts=TS,
                          nonce=bytes.fromhex(vector["nonce"]), re=bytes.fromhex(vector["re"]),
                          compact=vector["compact"])
    return codec.encode(mtype, auth, body)


def generate() -> dict[str, Any]:
    index = RangeIndex.from_digest(_digest({o: list(e) for o, e in ENTRIES.items()}))
    a, b = _origin("a"), _origin("b")
    root_split = b"".join(fp[:CHILD_FP_BYTES_COMPACT] for fp, _ in index.children(0, 0, 2))
    bodies: list[tuple[str, str, str, bool, codec.Body]] = [
        ("sync-root-w3", "a", "SYNC", False, Sync(index.root, revision=COMPACT)),
        ("in-sync-compact", "b", "IN_SYNC", True, InSync()),
        ("recon-root-split-compact", "b", "RECON", True, Recon((Split(0, 0, 2, root_split),))),
        ("recon-items-and-split-compact", "a", "RECON", True, Recon((
            Items(2, 1, _digest({o: list(ENTRIES[o]) for o in ("4000000000000000", "4000000000000001")})),
            Split(2, 2, 1, bytes(CHILD_FP_BYTES_COMPACT) + index.children(2, 2, 1)[1][0][:CHILD_FP_BYTES_COMPACT])))),
        ("recon-lacking-compact", "b", "RECON", True, Recon(lacking=("4000000000000000",))),
    ]
    messages = []
    for i, (name, sender, mtype, compact, body) in enumerate(bodies):
        request = sender == "a"
        vector = {"name": name, "type": mtype, "from": sender, "to": b if request else a, "compact": compact,
                  "nonce": bytes([i + 1]).hex() * 16,
                  "re": "00" * 16 if request else bytes([i]).hex() * 16, "body": _meaning(body)}
        vector["hex"] = seal(vector).hex()
        messages.append(vector)
    return {"about": "gossip revision 3, compact (PROTOCOL.md §11): SYNC says w 3; RECON and IN_SYNC after it "
                     "carry 4-byte child fingerprints and an auth part without o and to (signed as in revision 2, "
                     "over the sender's and the receiver's origins); keys are Ed25519 from the seeds of "
                     "gossip_recon.json, ts is " + str(TS),
            "seeds": SEEDS, "origins": {"a": a, "b": b}, "ts": TS, "messages": messages}


VECTORS_JSON: dict[str, Any] = json.loads(PATH.read_text()) if PATH.exists() else {"messages": []}


def test_the_file_is_what_the_code_generates() -> None:
    assert generate() == VECTORS_JSON


@pytest.mark.parametrize("vector", VECTORS_JSON["messages"], ids=lambda v: v["name"])
def test_a_compact_vector_decodes_to_its_meaning_and_encodes_to_its_bytes(vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    envelope = codec.decode(data)
    assert envelope.type is MessageType[vector["type"]] and envelope.auth.compact == vector["compact"]
    assert envelope.auth.origin == VECTORS_JSON["origins"][vector["from"]]
    assert envelope.auth.to == ("" if vector["compact"] else vector["to"])
    peer_auth.verify(envelope.auth, envelope.type, envelope.body, me=vector["to"], now_s=VECTORS_JSON["ts"],
                     skew_s=None, re=bytes.fromhex(vector["re"]))
    assert _meaning(codec.decode_body(envelope.type, envelope.body)) == vector["body"]
    assert seal(vector) == data


if __name__ == "__main__":
    PATH.write_text(json.dumps(generate(), indent=1) + "\n")
    print(f"wrote {PATH}")
