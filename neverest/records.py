"""Wire records v1: build, sign, serialise, parse and verify.

Four record types travel between memories (PROTOCOL.md §1):

- a lesson:       v, hash, origin, key, kind, text, seen, strength, updated, sig
- a confirmation: v, confirm, origin, key, at, sig
- a revocation:   v, revoke, origin, key, at, sig
- a refutation:   v, refute, origin, key, at, sig   (a v1 extension, PROTOCOL.md §1, "Refutations")

plus the optional extension field ``seq`` (a per-origin counter) and any
unknown fields, which readers keep and the signature still covers.

A record travels as exactly one canonical serialisation: JSON with sorted keys,
no spaces, UTF-8 without ASCII escaping, ``sig`` included.  The signature covers
the same serialisation without ``sig``.  Because keys are sorted and there is no
whitespace, removing the ``"sig":"…"`` member from the bytes received yields
exactly the signed bytes, so a verifier *cuts* ``sig`` out of what it received
and never re-serialises (PROTOCOL.md §1).  A re-spaced or re-ordered line therefore
does not verify, and a relay that stores and forwards the received bytes can
never break a signature.  The members must be in sorted key order with ``sig``
where that order puts it, so that one signed message has exactly one line: a
moved ``sig`` would otherwise cut to the same signed bytes and make a second,
different line of the same record (a forged fork).

``parse`` runs the cheap checks first and the Ed25519 verification last, so a
flood of malformed lines costs little.  Every refusal is a ``RecordError`` with
a code from the closed set ``REASONS`` and a human message.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

from neverest.hashes import blake2b, sha256

# PyNaCl and the safety rule's compiled patterns are imported by the functions that sign, verify and
# check a lesson's text: a command that only reads the memory (`neverestctl lessons`, `status`) loads
# neither (docs/figures.md, start-up).  Their import is a dictionary look-up after the first call.
if TYPE_CHECKING:
    import nacl.signing

WIRE_VERSION: Final = 1
# One record, as received, without its line ending.  Lessons are short
# observations (a sentence or two); 16 KiB leaves room for unknown extension
# fields while bounding what one line can make a reader allocate.
MAX_RECORD_BYTES: Final = 16 * 1024
KINDS: Final = ("error", "correction", "surprise")

RecordType = Literal["lesson", "confirm", "revoke", "refute"]
T_Tag = TypeVar("T_Tag")

# The closed set of refusal codes.  Programs rely on these strings: add, never rename.
REASONS: Final = frozenset(
    {
        "too-large",  # over MAX_RECORD_BYTES
        "bad-encoding",  # not valid UTF-8
        "not-json",  # not parseable JSON (truncated, garbage, NaN/Infinity)
        "too-deep",  # JSON nested beyond what the parser allows
        "not-object",  # valid JSON, but not an object
        "duplicate-key",  # an object with the same key twice
        "bad-version",  # v missing or not 1
        "bad-type",  # not exactly one of lesson, confirmation, revocation, refutation
        "bad-field",  # a field missing or of the wrong type or shape
        "bad-kind",  # lesson kind outside error/correction/surprise
        "hash-mismatch",  # hash is not blake2b-128(kind + norm(text))
        "origin-mismatch",  # origin is not the fingerprint of key
        "bad-signature",  # no sig, or sig does not verify over the cut bytes
        "imperative",  # the lesson text is an instruction (safety rule 1)
    }
)

_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?(?:Z|[+-]\d\d:\d\d)")
_TYPE_FIELDS: Final[dict[str, RecordType]] = {
    "hash": "lesson", "confirm": "confirm", "revoke": "revoke", "refute": "refute"}
# The field that names a record's lesson, by type.
TARGET_FIELD: Final[dict[str, str]] = {"lesson": "hash", "confirm": "confirm", "revoke": "revoke", "refute": "refute"}


class RecordError(ValueError):
    """A record was refused.  ``code`` is one of ``REASONS``; the message says why."""

    def __init__(self, code: str, message: str) -> None:
        assert code in REASONS, code
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Record:
    """A verified record: the exact bytes received and the fields read from them.

    Treat it as immutable (it is not frozen because a frozen class is several times slower to build,
    and one is built per record received).  A plain class, not a dataclass: the read commands import
    this module, and ``dataclasses`` (with ``inspect``) costs them about 9 ms a process.
    """

    __slots__ = ("fields", "key", "origin", "raw", "seq", "target", "type")

    def __init__(self, type: RecordType, raw: bytes, fields: Mapping[str, Any], origin: str, key: str,
                 target: str, seq: int | None) -> None:
        self.type = type
        self.raw = raw  # the canonical line as received, without line ending
        self.fields = fields
        self.origin = origin
        self.key = key
        self.target = target  # the lesson's own hash, or the hash a confirmation/revocation names
        self.seq = seq

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Record:
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in Record.__slots__)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was

    def __repr__(self) -> str:
        return f"Record(type={self.type!r}, origin={self.origin!r}, target={self.target!r}, seq={self.seq!r})"

    @property
    def hash(self) -> str:
        return self.target

    @property
    def line(self) -> str:
        return self.raw.decode("utf-8")


# -- identity of lessons and memories ------------------------------------------------


def norm(text: str) -> str:
    """Lower-case and collapse every run of whitespace to one space (PROTOCOL.md §1)."""
    return " ".join(text.lower().split())


def lesson_hash(kind: str, text: str) -> str:
    """BLAKE2b-128 over kind + norm(text), no separator: a lesson's identity across memories."""
    return blake2b((kind + norm(text)).encode("utf-8"), digest_size=16).hexdigest()


def origin_of(public_key: bytes) -> str:
    """A memory's id: the first 8 bytes of SHA-256 of its raw Ed25519 public key, hex."""
    return sha256(public_key).digest()[:8].hex()


@functools.lru_cache(maxsize=4096)
def _origin_of_hex(key: str) -> str:
    # Records arrive from a few hundred origins at most; their fingerprints repeat.
    return origin_of(bytes.fromhex(key))


def canonical(fields: Mapping[str, Any]) -> bytes:
    """The one serialisation records are signed and sent in."""
    return json.dumps(
        fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


# -- building ------------------------------------------------------------------------


def _sign(signing_key: nacl.signing.SigningKey, fields: dict[str, Any]) -> Record:
    """Sign ``fields`` and return the record exactly as a receiver will parse it."""
    public = bytes(signing_key.verify_key)
    fields = dict(fields, v=WIRE_VERSION, key=public.hex(), origin=origin_of(public))
    fields.pop("sig", None)
    try:
        unsigned = canonical(fields)
    except (UnicodeEncodeError, ValueError) as exc:
        raise RecordError("bad-field", f"cannot serialise record: {exc}") from exc
    fields["sig"] = signing_key.sign(unsigned).signature.hex()
    raw = canonical(fields)
    # Round-trip through the receiver's own checks, so that this memory never
    # signs a record that others would refuse (an imperative, an oversize text...).
    return parse(raw)


def sign_lesson(
    signing_key: nacl.signing.SigningKey,
    *,
    kind: str,
    text: str,
    seen: int,
    strength: float,
    updated: str,
    seq: int | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Record:
    """Build and sign a lesson record.  Raises RecordError if a receiver would refuse it."""
    fields: dict[str, Any] = dict(extra or {})
    fields.update(
        hash=lesson_hash(kind, text), kind=kind, text=text, seen=seen, strength=strength,
        updated=updated,
    )
    if seq is not None:
        fields["seq"] = seq
    return _sign(signing_key, fields)


def _sign_about(signing_key: nacl.signing.SigningKey, field: str, target: str, at: str,
                seq: int | None) -> Record:
    fields: dict[str, Any] = {field: target, "at": at}
    if seq is not None:
        fields["seq"] = seq
    return _sign(signing_key, fields)


def sign_confirm(
    signing_key: nacl.signing.SigningKey, target: str, *, at: str, seq: int | None = None
) -> Record:
    """Sign a confirmation: the lesson ``target`` came true in this memory's own sessions."""
    return _sign_about(signing_key, "confirm", target, at, seq)


def sign_revoke(
    signing_key: nacl.signing.SigningKey, target: str, *, at: str, seq: int | None = None
) -> Record:
    """Sign a revocation: this origin withdraws its lesson ``target``."""
    return _sign_about(signing_key, "revoke", target, at, seq)


def sign_refute(
    signing_key: nacl.signing.SigningKey, target: str, *, at: str, seq: int | None = None
) -> Record:
    """Sign a refutation: this memory's own sessions met the situation of lesson ``target`` and it
    did not hold.  Only the verify pass signs one (PROTOCOL.md §1, "Refutations"); it revokes nothing by itself."""
    return _sign_about(signing_key, "refute", target, at, seq)


# -- parsing and verifying -----------------------------------------------------------


class _DuplicateKey(Exception):
    pass


def _object_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _DuplicateKey
    return obj


def _no_constants(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON does not, and neither do we.
    raise ValueError(f"{name} is not JSON")


_decoder = json.JSONDecoder(object_pairs_hook=_object_pairs, parse_constant=_no_constants)
_plain_decoder = json.JSONDecoder()  # for bytes already verified (``verified``)


def _load(raw: bytes) -> Any:
    if len(raw) > MAX_RECORD_BYTES:
        raise RecordError("too-large", f"record is {len(raw)} bytes; the limit is {MAX_RECORD_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError("bad-encoding", f"not UTF-8 at byte {exc.start}") from None
    try:
        # One decoder, its pairs hook called for every object (nested ones included), so a
        # duplicate key is caught however it is spelled: spaces before the colon, escapes
        # in the key ("stre\u006egth").  No byte-count shortcut: such a count can be
        # fooled by spacing, and measured on CPython 3.11 the hook costs no more than the
        # plain C decoder plus the counting did.
        # raw_decode skips the Python-level whitespace handling of decode(); a canonical
        # record has no whitespace around it, so anything after the value is refused.
        obj, end = _decoder.raw_decode(text)
        if end != len(text):
            raise ValueError(f"unexpected data after the JSON value at character {end}")
        return obj
    except _DuplicateKey:
        raise RecordError("duplicate-key", "an object has the same key twice") from None
    except RecursionError:
        raise RecordError("too-deep", "JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, NaN, huge integers
        raise RecordError("not-json", f"invalid JSON: {exc}") from None


# Deletes the lower-case hex digits: what is left of a hex string is nothing.
_NOT_HEX: Final = str.maketrans("", "", "0123456789abcdef")


def _is_hex(value: Any, length: int) -> bool:
    """``length`` lower-case hex digits.  str.translate is one C pass over the text: 0.25 µs for a
    signature's 128 digits, where str.strip with the digits as its set took 0.75 and a regex 0.33."""
    return type(value) is str and len(value) == length and not value.translate(_NOT_HEX)


def _hex(obj: Mapping[str, Any], name: str, length: int, what: str) -> str:
    value = obj.get(name)
    if not _is_hex(value, length):
        raise RecordError("bad-field", f"{name} must be {what}")
    return str(value)


def _timestamp(obj: Mapping[str, Any], name: str) -> None:
    value = obj.get(name)
    if isinstance(value, str) and _TIME.fullmatch(value) is not None:
        try:
            datetime.fromisoformat(value)  # rejects what the pattern lets through: month 13, hour 25...
            return
        except ValueError:
            pass
    raise RecordError("bad-field", f"{name} must be an ISO 8601 time with a zone, like 2026-11-21T03:00:00.000000Z")


def _positive_int(value: Any) -> bool:
    # bool is a subclass of int in Python; `true` is not a count.
    return type(value) is int and value >= 1


def _record_type(obj: Mapping[str, Any]) -> RecordType:
    present = [rtype for name, rtype in _TYPE_FIELDS.items() if name in obj]
    if len(present) != 1:
        raise RecordError("bad-type", "a record must be exactly one of lesson (hash), confirm, revoke or refute")
    return present[0]


def _check_fields(obj: Mapping[str, Any], rtype: RecordType) -> str:
    """Validate every field's type and shape; return the target hash."""
    if rtype == "lesson":
        target = _hex(obj, "hash", 32, "32 lower-case hex digits")
        kind = obj.get("kind")
        if not isinstance(kind, str):
            raise RecordError("bad-field", "kind must be a string")
        if kind not in KINDS:
            raise RecordError("bad-kind", f"kind {kind[:40]!r} is not one of {', '.join(KINDS)}")
        text = obj.get("text")
        if not isinstance(text, str) or not text.strip():
            raise RecordError("bad-field", "text must be a non-empty string")
        if not _positive_int(obj.get("seen")):
            raise RecordError("bad-field", "seen must be a positive integer")
        strength: Any = obj.get("strength")
        # type() is exact: bool, a subclass of int, is not a strength.
        if type(strength) not in (float, int) or not 0 <= strength < math.inf:
            raise RecordError("bad-field", "strength must be a finite number ≥ 0")
        _timestamp(obj, "updated")
    else:
        target = _hex(obj, rtype, 32, "a 32-hex-digit lesson hash")
        _timestamp(obj, "at")
    if "seq" in obj and not _positive_int(obj["seq"]):
        raise RecordError("bad-field", "seq must be a positive integer")
    return target


def _signed_message(raw: bytes, sig: str) -> bytes:
    """signature ‖ the bytes it covers: ``raw`` with its ``"sig":"…"`` member cut out.

    The member must sit exactly where the canonical serialisation puts it: directly after
    the ``,`` (or the ``{``) before it and directly before the ``,`` (or the ``}``) after it,
    with the members in sorted key order (``check`` sees to that).  Then one signed message
    admits exactly one line: a third party who moves ``sig`` elsewhere (to the front, into a
    run of the signer's own spaces) makes a line that does not verify, instead of a second
    line with the same origin and seq that receivers would keep as fork evidence.
    """
    member = b'"sig":"' + sig.encode("ascii") + b'"'
    at = raw.find(member)
    end = at + len(member)
    # The member must appear exactly once, as a top-level member, so that a
    # nested copy in an extension field cannot be the one that gets cut.
    if at < 1 or raw.find(member, end) != -1:
        raise RecordError("bad-signature", "sig member not found exactly once")
    before, after = raw[at - 1], raw[end : end + 1]
    signature = bytes.fromhex(sig)
    if before == 0x2C and (after == b"," or after == b"}"):  # ','
        return b"".join((signature, raw[: at - 1], raw[end:]))
    if before == 0x7B and after == b",":  # '{' then ','
        return b"".join((signature, raw[:at], raw[end + 1 :]))
    if before == 0x7B and after == b"}":
        return signature + b"{}"
    raise RecordError("bad-signature", "sig is not a top-level member placed as canonical serialisation places it")


# safety.imperative_reason, loaded by the first lesson checked (the read commands import this module
# and never check one).  A global, not an import statement in ``check``: that costs 0.6 µs a record.
_imperative: Callable[[str], str | None] | None = None


def _load_imperative() -> Callable[[str], str | None]:
    global _imperative
    from neverest.safety import imperative_reason

    _imperative = imperative_reason
    return imperative_reason


def check(line: bytes | str) -> tuple[Record, bytes, bytes]:
    """Every check except the Ed25519 one: (record, signature ‖ signed bytes, public key).

    ``parse`` is ``check`` then ``check_signature``; ``verify_many`` runs the two on
    different threads.  A Record from ``check`` alone is *not* verified: never store it.
    """
    raw = line.encode("utf-8") if isinstance(line, str) else bytes(line)
    obj = _load(raw)
    if not isinstance(obj, dict):
        raise RecordError("not-object", f"a record is a JSON object, not {type(obj).__name__}")
    v = obj.get("v")
    if type(v) is not int or v != WIRE_VERSION:
        raise RecordError("bad-version", f"v must be {WIRE_VERSION}")
    rtype = _record_type(obj)
    target = _check_fields(obj, rtype)
    key = _hex(obj, "key", 64, "a 64-hex-digit Ed25519 public key")
    origin = _hex(obj, "origin", 16, "16 lower-case hex digits")
    if _origin_of_hex(key) != origin:
        raise RecordError("origin-mismatch", "origin is not the fingerprint of key")
    if rtype == "lesson":
        if lesson_hash(obj["kind"], obj["text"]) != target:
            raise RecordError("hash-mismatch", "hash is not the hash of kind and text")
        reason = (_imperative or _load_imperative())(obj["text"])
        if reason is not None:
            raise RecordError("imperative", f"a lesson is an observation, not an instruction: {reason}")
    sig = obj.get("sig")
    if sig is None:
        raise RecordError("bad-signature", "the record is not signed")
    if not _is_hex(sig, 128):
        raise RecordError("bad-signature", "sig must be 128 lower-case hex digits")
    # The members in sorted key order, sig among them where sorting puts it: the order the
    # signer serialised (PROTOCOL.md §1).  Timsort over already sorted keys is one linear pass.
    keys = list(obj)
    if keys != sorted(keys):
        raise RecordError("bad-signature", "the members are not in sorted key order, so sig is not where it was "
                                           "signed")
    record = Record(type=rtype, raw=raw, fields=obj, origin=origin, key=key, target=target, seq=obj.get("seq"))
    return record, _signed_message(raw, sig), bytes.fromhex(key)


def check_signature(signed_message: bytes, public_key: bytes) -> None:
    """The Ed25519 check of ``check``'s output.  Raises RecordError("bad-signature")."""
    import nacl.bindings
    import nacl.exceptions

    try:
        # crypto_sign_open is the primitive under VerifyKey.verify, without its
        # extra copies.  PyNaCl's cffi call releases the GIL while libsodium works.
        nacl.bindings.crypto_sign_open(signed_message, public_key)
    except (nacl.exceptions.BadSignatureError, ValueError):
        raise RecordError("bad-signature", "signature does not verify over the bytes received") from None


def parse(line: bytes | str) -> Record:
    """Parse and fully verify one record line (without its line ending).

    Raises RecordError with a code from REASONS.  The returned Record keeps the
    bytes exactly as received, which is how it must be stored and relayed.
    """
    record, signed_message, public_key = check(line)
    check_signature(signed_message, public_key)
    return record


_BATCH: Final = 64


def parse_many(lines: Iterable[tuple[T_Tag, bytes | str | None]]) -> Iterator[tuple[T_Tag, Record | RecordError]]:
    """``parse`` over ``(tag, line)`` pairs, yielding ``(tag, Record or RecordError)`` in order.

    A ``None`` line (one a reader would not hold, being too large) yields a too-large
    refusal.  The work is done in small batches, the Python checks of a batch first and
    then its Ed25519 checks: alternating the two record by record evicts libsodium's
    tables from the CPU caches and costs about a fifth of the throughput.
    """
    batch: list[tuple[Any, Record | RecordError, bytes, bytes]] = []
    for tag, line in lines:
        if line is None:
            batch.append((tag, RecordError("too-large", f"line is longer than {MAX_RECORD_BYTES} bytes"), b"", b""))
        else:
            try:
                batch.append((tag, *check(line)))
            except RecordError as exc:
                batch.append((tag, exc, b"", b""))
        if len(batch) == _BATCH:
            yield from _finish(batch)
            batch = []
    yield from _finish(batch)


def _finish(batch: list[tuple[Any, Record | RecordError, bytes, bytes]]) -> Iterator[tuple[Any, Record | RecordError]]:
    for tag, record, message, key in batch:
        if isinstance(record, Record):
            try:
                check_signature(message, key)
            except RecordError as exc:
                yield tag, exc
                continue
        yield tag, record


def verdicts(lines: list[bytes | None]) -> list[list[str] | None]:
    """``parse_many`` as plain data, for a verifying process (``verify_pool``): per line ``None``
    (a valid record) or ``[reason, message]``."""
    return [None if isinstance(item, Record) else [item.code, item.message]
            for _, item in parse_many((None, line) for line in lines)]


def verified(raw: bytes, obj: dict[str, Any] | None = None) -> Record:
    """The Record of bytes that ``parse`` accepted elsewhere (a verifying process,
    ``verify_pool``): the fields read again without the checks, or ``obj`` when the caller
    already read them (``json.loads(raw)``: gossip's screen reads every record of an answer for
    its origin and seq).  Never call it on bytes that were not verified: it trusts them.
    (Python's plain JSON decoder reads a verified line exactly as the checking one did: that one
    refused duplicate keys and constants.)"""
    if obj is None:
        obj = _plain_decoder.decode(raw.decode("utf-8"))
    rtype = _type_of_verified(obj)
    field = "hash" if rtype == "lesson" else rtype
    return Record(type=rtype, raw=raw, fields=obj, origin=obj["origin"], key=obj["key"], target=obj[field],
                  seq=obj.get("seq"))


def _type_of_verified(obj: Mapping[str, Any]) -> RecordType:
    # A verified record has exactly one of the type fields (``_record_type`` checked it): the first found is it.
    for name, rtype in _TYPE_FIELDS.items():
        if name in obj:
            return rtype
    raise RecordError("bad-type", "a record must be exactly one of lesson (hash), confirm, revoke or refute")


def claimed(line: bytes | str) -> tuple[RecordType | None, str | None, str | None]:
    """Best-effort (type, hash, origin) a refused line claims, for reports; never raises."""
    try:
        obj = _load(line.encode("utf-8") if isinstance(line, str) else bytes(line))
    except RecordError:
        return None, None, None
    if not isinstance(obj, dict):
        return None, None, None
    try:
        rtype: RecordType | None = _record_type(obj)
    except RecordError:
        rtype = None
    field = TARGET_FIELD.get(rtype or "")
    target = obj.get(field) if field else None
    origin = obj.get("origin")
    return (
        rtype,
        target if _is_hex(target, 32) else None,
        origin if _is_hex(origin, 16) else None,
    )
