"""Pinned vectors of gossip revision 2 (tests/vectors/gossip_recon.json): range fingerprints and
SYNC/RECON messages, byte for byte.

Another implementation can check itself against the file alone: each message is given as
hex with its meaning (keys from fixed seeds, fixed timestamps and nonces; Ed25519 signing is
deterministic).  Regenerate after a deliberate change of the format with
``python -m tests.test_gossip_recon_vectors``, and say so in PROTOCOL.md.
"""

from __future__ import annotations

import json
from typing import Any

import nacl.signing
import pytest

from neverest.gossip import codec, peer_auth
from neverest.gossip.codec import Digest, Items, MessageType, Recon, Split, Sync
from neverest.gossip.ranges import RangeIndex, item_hash
from neverest.records import origin_of
from tests.conftest import VECTORS

PATH = VECTORS / "gossip_recon.json"
SEEDS = {"a": "51" * 32, "b": "52" * 32}
TS = 1_775_044_800  # 2026-04-01T12:00:00Z
ENTRIES = {  # origin → (seq, hash): the edges of the origin space and a few in between
    "0000000000000001": (1, "0101010101010101"),
    "4000000000000000": (7, "0202020202020202"),
    "4000000000000001": (300, "0303030303030303"),
    "7fffffffffffffff": (2**40, "0404040404040404"),
    "8000000000000000": (2, "0505050505050505"),
    "ffffffffffffffff": (2**63 - 1, "0606060606060606"),
}
RANGES = [(0, 0), (1, 0), (1, 1), (2, 1), (3, 5), (63, 0x2000000000000000), (64, 0xFFFFFFFFFFFFFFFF)]
RECORD = b'{"origin":"0000000000000001","seq":2,"at":"2026-04-01T12:00:00.000000Z","text":"a record"}'


def _key(who: str) -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey(bytes.fromhex(SEEDS[who]))


def _origin(who: str) -> str:
    return origin_of(bytes(_key(who).verify_key))


def _digest(entries: dict[str, list[Any]]) -> Digest:
    return Digest({o: (seq, bytes.fromhex(h)) for o, (seq, h) in entries.items()})


def _entries_json(digest: Digest) -> dict[str, list[Any]]:
    return {o: [seq, h.hex()] for o, (seq, h) in sorted(digest.items())}


def meaning(body: codec.Body) -> dict[str, Any]:
    """A body as JSON (what a vector says the bytes mean)."""
    if isinstance(body, Sync):
        out: dict[str, Any] = {"f": body.fingerprint.hex(), "w": body.revision}
        if body.digest is not None:
            out["d"] = _entries_json(body.digest)
        return out
    assert isinstance(body, Recon)
    nodes: list[dict[str, Any]] = []
    for node in body.nodes:
        if isinstance(node, Split):
            nodes.append({"split": [node.bits, node.prefix, node.b, node.fingerprints.hex()]})
        else:
            nodes.append({"items": [node.bits, node.prefix, _entries_json(node.entries)]})
    return {"n": nodes, "e": _entries_json(body.entries) if body.entries else None, "x": list(body.lacking),
            "r": [r.decode() for r in body.records], "m": body.more}


def body_of(mtype: str, data: dict[str, Any]) -> codec.Body:
    if mtype == "SYNC":
        return Sync(bytes.fromhex(data["f"]), _digest(data["d"]) if "d" in data else None, revision=data["w"])
    nodes: list[codec.Node] = []
    for node in data["n"]:
        if "split" in node:
            bits, prefix, b, fps = node["split"]
            nodes.append(Split(bits, prefix, b, bytes.fromhex(fps)))
        else:
            bits, prefix, entries = node["items"]
            nodes.append(Items(bits, prefix, _digest(entries)))
    return Recon(tuple(nodes), _digest(data["e"]) if data["e"] else None, tuple(data["x"]),
                 tuple(r.encode() for r in data["r"]), data["m"])


def seal(vector: dict[str, Any]) -> bytes:
    body = codec.encode_body(body_of(vector["type"], vector["body"]))
    mtype = MessageType[vector["type"]]
    auth = peer_auth.sign(_key(vector["from"]), mtype, body, to=vector["to"], ts=TS,
                          nonce=bytes.fromhex(vector["nonce"]), re=bytes.fromhex(vector["re"]))
    return codec.encode(mtype, auth, body)


def generate() -> dict[str, Any]:
    index = RangeIndex.from_digest(_digest({o: list(e) for o, e in ENTRIES.items()}))
    fingerprints = {
        "entries": {o: [seq, h] for o, (seq, h) in ENTRIES.items()},
        "item_hashes": {o: f"{item_hash(o, (seq, bytes.fromhex(h))):032x}" for o, (seq, h) in ENTRIES.items()},
        "ranges": [{"bits": bits, "prefix": prefix, "count": index.count(bits, prefix),
                    "fingerprint": index.fingerprint(bits, prefix).hex()} for bits, prefix in RANGES],
        "split_root_b2": [fp.hex() for fp, _ in index.children(0, 0, 2)],
    }
    a, b = _origin("a"), _origin("b")
    small = _digest({o: list(ENTRIES[o]) for o in list(ENTRIES)[:2]})
    root_split = b"".join(fp[:8] for fp, _ in index.children(0, 0, 2))
    bodies: list[tuple[str, str, str, codec.Body]] = [
        ("sync-root", "a", "SYNC", Sync(index.root, revision=2)),
        ("sync-inline-digest", "a", "SYNC", Sync(small.fingerprint, small, revision=2)),
        ("recon-root-split", "b", "RECON", Recon((Split(0, 0, 2, root_split),))),
        ("recon-items-and-split", "a", "RECON", Recon((
            Items(2, 1, _digest({o: list(ENTRIES[o]) for o in ("4000000000000000", "4000000000000001")})),
            Split(2, 2, 1, bytes(8) + index.children(2, 2, 1)[1][0][:8])))),
        ("recon-entries-records-more", "b", "RECON", Recon(
            entries=_digest({"4000000000000001": [299, "0707070707070707"]}), lacking=("4000000000000000",),
            records=(RECORD,), more=True)),
        ("recon-empty", "a", "RECON", Recon()),
    ]
    messages = []
    for i, (name, sender, mtype, body) in enumerate(bodies):
        request = sender == "a"
        vector = {"name": name, "type": mtype, "from": sender, "to": b if request else a,
                  "nonce": bytes([i + 1]).hex() * 16,
                  "re": "00" * 16 if request else bytes([i]).hex() * 16, "body": meaning(body)}
        vector["hex"] = seal(vector).hex()
        messages.append(vector)
    return {"about": "gossip revision 2 (PROTOCOL.md §11): range fingerprints and SYNC/RECON messages; keys are "
                     "Ed25519 from the seeds, ts is " + str(TS) + "; a reply's re is the nonce of the request before "
                     "it",
            "seeds": SEEDS, "origins": {"a": a, "b": b}, "ts": TS, "fingerprints": fingerprints,
            "messages": messages}


VECTORS_JSON: dict[str, Any] = json.loads(PATH.read_text()) if PATH.exists() else {"messages": []}


def test_the_file_is_what_the_code_generates() -> None:
    assert generate() == VECTORS_JSON


def test_range_fingerprints_match_the_vectors() -> None:
    pinned = VECTORS_JSON["fingerprints"]
    index = RangeIndex.from_digest(_digest(pinned["entries"]))
    for origin, (seq, h) in pinned["entries"].items():
        assert f"{item_hash(origin, (seq, bytes.fromhex(h))):032x}" == pinned["item_hashes"][origin]
    for case in pinned["ranges"]:
        assert index.count(case["bits"], case["prefix"]) == case["count"]
        assert index.fingerprint(case["bits"], case["prefix"]).hex() == case["fingerprint"]
    assert [fp.hex() for fp, _ in index.children(0, 0, 2)] == pinned["split_root_b2"]


@pytest.mark.parametrize("vector", VECTORS_JSON["messages"], ids=lambda v: v["name"])
def test_a_message_vector_decodes_to_its_meaning_and_encodes_to_its_bytes(vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    envelope = codec.decode(data)
    assert envelope.type is MessageType[vector["type"]]
    assert (envelope.auth.origin, envelope.auth.to, envelope.auth.ts) == (
        VECTORS_JSON["origins"][vector["from"]], vector["to"], VECTORS_JSON["ts"])
    peer_auth.verify(envelope.auth, envelope.type, envelope.body, me=vector["to"], now_s=VECTORS_JSON["ts"],
                     skew_s=None, re=bytes.fromhex(vector["re"]))
    assert meaning(codec.decode_body(envelope.type, envelope.body)) == vector["body"]
    assert seal(vector) == data


if __name__ == "__main__":
    PATH.write_text(json.dumps(generate(), indent=1) + "\n")
    print(f"wrote {PATH}")
