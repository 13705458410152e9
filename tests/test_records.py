"""Building, signing, parsing and verifying records, and hostile lines."""

from __future__ import annotations

import json

import nacl.signing
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from neverest.records import (
    KINDS,
    MAX_RECORD_BYTES,
    REASONS,
    RecordError,
    canonical,
    lesson_hash,
    norm,
    parse,
    sign_confirm,
    sign_lesson,
    sign_revoke,
)
from neverest.safety import is_imperative

AT = "2026-11-21T03:00:00.000000Z"
SEED = bytes(range(32))
KEY = nacl.signing.SigningKey(SEED)


def lesson(text: str = "The cache directory fills up after a week", **kw: object) -> bytes:
    args: dict[str, object] = {"kind": "error", "text": text, "seen": 2, "strength": 1.25, "updated": AT}
    args.update(kw)
    return sign_lesson(KEY, **args).raw  # type: ignore[arg-type]


def code_of(line: bytes | str) -> str:
    with pytest.raises(RecordError) as err:
        parse(line)
    assert err.value.code in REASONS
    return err.value.code


def resign(fields: dict[str, object]) -> bytes:
    """Sign arbitrary fields canonically, bypassing the builder's own checks."""
    fields = {k: v for k, v in fields.items() if k != "sig"}
    fields["sig"] = KEY.sign(canonical(fields)).signature.hex()
    return canonical(fields)


def test_lesson_round_trip() -> None:
    raw = lesson(seq=7)
    rec = parse(raw)
    assert rec.type == "lesson" and rec.raw == raw and rec.seq == 7
    assert rec.target == lesson_hash("error", "The cache directory fills up after a week")
    assert rec.fields["seen"] == 2 and rec.fields["strength"] == 1.25
    assert rec.origin == parse(lesson()).origin and len(rec.origin) == 16


def test_signed_bytes_are_canonical_and_sig_is_cut_not_reserialised() -> None:
    raw = lesson()
    fields = json.loads(raw)
    assert canonical(fields) == raw
    # The same fields, re-spaced: the signature no longer covers the bytes received.
    spaced = json.dumps(fields, sort_keys=True, ensure_ascii=False).encode()
    assert code_of(spaced) == "bad-signature"


def test_confirm_and_revoke_round_trip() -> None:
    target = lesson_hash("error", "x y")
    c = parse(sign_confirm(KEY, target, at=AT, seq=3).raw)
    r = parse(sign_revoke(KEY, target, at=AT).raw)
    assert (c.type, c.target, c.seq) == ("confirm", target, 3)
    assert (r.type, r.target, r.seq) == ("revoke", target, None)


def test_unknown_fields_are_kept_and_signed() -> None:
    raw = lesson(extra={"zz_note": {"nested": [1, 2]}, "aa": "first"})
    assert parse(raw).fields["zz_note"] == {"nested": [1, 2]}
    assert raw.startswith(b'{"aa":"first"')


def test_builder_refuses_what_receivers_would_refuse() -> None:
    with pytest.raises(RecordError) as err:
        sign_lesson(KEY, kind="error", text="Always run the tests first", seen=1, strength=1.0, updated=AT)
    assert err.value.code == "imperative"
    with pytest.raises(RecordError) as err:
        sign_lesson(KEY, kind="note", text="The cache fills up", seen=1, strength=1.0, updated=AT)
    assert err.value.code == "bad-kind"
    with pytest.raises(RecordError) as err:
        sign_lesson(KEY, kind="error", text="x" * MAX_RECORD_BYTES, seen=1, strength=1.0, updated=AT)
    assert err.value.code == "too-large"


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"v": 2}, "bad-version"),
        ({"v": True}, "bad-version"),
        ({"seen": True}, "bad-field"),
        ({"seen": -1}, "bad-field"),
        ({"strength": "1"}, "bad-field"),
        ({"strength": -0.5}, "bad-field"),
        ({"updated": "yesterday"}, "bad-field"),
        ({"updated": "2026-11-21T03:00:00"}, "bad-field"),  # no zone
        ({"text": ""}, "bad-field"),
        ({"text": 5}, "bad-field"),
        ({"kind": 3}, "bad-field"),
        ({"seq": 0}, "bad-field"),
        ({"seq": "4"}, "bad-field"),
        ({"key": "AB" * 32}, "bad-field"),
        ({"origin": "0" * 15}, "bad-field"),
        ({"confirm": "0" * 32}, "bad-type"),
    ],
)
def test_field_refusals(change: dict[str, object], code: str) -> None:
    fields = json.loads(lesson())
    fields.update(change)
    assert code_of(resign(fields)) == code


def test_missing_fields_are_refused() -> None:
    for name in ("hash", "kind", "text", "seen", "strength", "updated", "key", "origin"):
        fields = json.loads(lesson())
        del fields[name]
        assert code_of(resign(fields)) in {"bad-field", "bad-type", "bad-kind"}, name
    fields = json.loads(lesson())
    del fields["v"]
    assert code_of(resign(fields)) == "bad-version"


def test_another_keys_signature_is_refused(other_key: nacl.signing.SigningKey) -> None:
    fields = json.loads(lesson())
    del fields["sig"]
    fields["sig"] = other_key.sign(canonical(fields)).signature.hex()
    assert code_of(canonical(fields)) == "bad-signature"


def test_sig_copied_into_a_nested_field_cannot_be_cut_instead() -> None:
    fields = json.loads(lesson())
    fields["zz"] = {"sig": fields["sig"]}
    assert code_of(canonical(fields)) == "bad-signature"


def test_duplicate_keys_are_refused() -> None:
    raw = lesson()
    assert code_of(raw[:-1] + b',"v":1}') == "duplicate-key"


def _signed_as_is(unsigned: bytes) -> bytes:
    """``unsigned`` signed by KEY as it stands, sig inserted at its sorted place (after seen)."""
    sig = KEY.sign(unsigned).signature.hex().encode()
    at = unsigned.index(b',"strength"')
    return unsigned[:at] + b',"sig":"' + sig + b'"' + unsigned[at:]


@pytest.mark.parametrize("second", [
    b'"strength" :5.0',  # the space before the colon hid it from a byte count
    b'"strength"\t:5.0',
    b'"strength"\r\n :5.0',
    b'"stre\\u006egth":5.0',  # an escape in the key
    b'"\\u0073trength" : 5.0',
])
def test_a_duplicate_key_is_refused_however_it_is_spelled(second: bytes) -> None:
    # Signed by the origin itself, so only the duplicate can be what refuses it.
    fields = json.loads(lesson())
    del fields["sig"]
    unsigned = canonical(fields).replace(b'"strength":1.25', b'"strength":1.25,' + second)
    assert code_of(_signed_as_is(unsigned)) == "duplicate-key"


def test_a_duplicate_key_in_a_nested_object_is_refused() -> None:
    fields = json.loads(lesson())
    del fields["sig"]
    fields["zz"] = {"a": 1}
    unsigned = canonical(fields).replace(b'{"a":1}', b'{"a":1 , "a" :2}')
    assert code_of(_signed_as_is(unsigned)) == "duplicate-key"


json_keys = st.sampled_from(["v", "seen", "strength", "text", "zz"])
spacing = st.sampled_from(["", " ", "\t", "\n", "\r\n ", "  "])


@settings(max_examples=300)
@given(data=st.data())
def test_property_any_object_with_a_repeated_key_is_refused(data: st.DataObject) -> None:
    # Any flat or nested object whose members repeat a key, spaced any way JSON allows and
    # with any key spelled with \u escapes, is refused as duplicate-key.
    keys = data.draw(st.lists(json_keys, min_size=2, max_size=6).filter(lambda ks: len(set(ks)) < len(ks)))

    def spell(key: str) -> str:
        if data.draw(st.booleans()):
            return "".join(f"\\u{ord(c):04x}" if data.draw(st.booleans()) else c for c in key)
        return key

    members = [f'"{spell(k)}"{data.draw(spacing)}:{data.draw(spacing)}{data.draw(st.integers(0, 9))}' for k in keys]
    body = "{" + ",".join(members) + "}"
    line = body if data.draw(st.booleans()) else '{"outer":' + body + "}"
    assert code_of(line) == "duplicate-key"


def _moved(raw: bytes, where: bytes) -> bytes:
    """``raw`` with its sig member moved to just before the member that starts with ``where``."""
    sig: bytes = json.loads(raw)["sig"].encode()
    member = b'"sig":"' + sig + b'"'
    cut = raw.replace(b"," + member, b"")
    if where == b"{":
        return b"{" + member + b"," + cut[1:]
    at = cut.index(b"," + where)
    return cut[:at] + b"," + member + cut[at:]


@pytest.mark.parametrize("where", [b"{", b'"key"', b'"kind"', b'"text"', b'"v"'])
def test_sig_moved_elsewhere_does_not_verify(where: bytes) -> None:
    # Moving sig leaves the cut bytes unchanged; accepting the result would let anyone make a
    # second line with the record's origin and seq, stored and relayed as fork evidence.
    raw = lesson(seq=5)
    moved = _moved(raw, where)
    assert moved != raw and json.loads(moved) == json.loads(raw)
    assert code_of(moved) == "bad-signature"


def test_sig_moved_into_the_signers_own_spaces_does_not_verify() -> None:
    # A signer that put spaces in its line (its right: the signature covers them) still gets
    # exactly one line per signed message: sig directly after a comma and before the next one.
    fields = json.loads(lesson())
    del fields["sig"]
    unsigned = canonical(fields).replace(b',"strength"', b' , "strength"')
    sig = KEY.sign(unsigned).signature.hex().encode()
    member = b',"sig":"' + sig + b'"'
    at = unsigned.index(b" , ")
    good = unsigned[:at] + b" " + member + unsigned[at + 1:]  # {... "seen":2 ,"sig":"…", "strength"...
    moved = unsigned[:at] + member + unsigned[at:]  # {... "seen":2,"sig":"…" , "strength"...
    assert parse(good).fields["sig"] == sig.decode()
    assert code_of(moved) == "bad-signature"


def test_members_out_of_sorted_order_do_not_verify_even_signed_so() -> None:
    # Signed by the origin itself in another key order: refused, since with unsorted members
    # sig could sit in more than one place of the same signed bytes.
    fields = json.loads(lesson())
    del fields["sig"]
    unsorted = json.dumps(dict(reversed(list(fields.items()))), separators=(",", ":"),
                          ensure_ascii=False).encode()
    sig = KEY.sign(unsorted).signature.hex()
    line = unsorted[:-1] + b',"sig":"' + sig.encode() + b'"}'
    assert code_of(line) == "bad-signature"


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"", "not-json"),
        (b"\x00\x01\x02\xff\xfe garbage", "bad-encoding"),
        (b'{"v":1,"text":"caf\xc3"}', "bad-encoding"),
        (b"{\"v\": NaN}", "not-json"),
        (b"{\"v\": Infinity}", "not-json"),
        (b'"just a string"', "not-object"),
        (b"null", "not-object"),
        (b"[" * 10_000 + b"]" * 10_000, "too-large"),
        (b"[" * 5_000 + b"]" * 5_000, "too-deep"),
        (b"{\"a\":" * 2_500 + b"1" + b"}" * 2_500, "too-deep"),
        (b"1" * 5000, "not-json"),  # an integer beyond Python's digit limit
    ],
)
def test_hostile_lines(line: bytes, code: str) -> None:
    assert code_of(line) == code


def test_truncated_record_is_refused() -> None:
    raw = lesson()
    for cut in (1, len(raw) // 2, len(raw) - 1):
        assert code_of(raw[:cut]) == "not-json"


# Lesson texts: any Unicode scalar values (no lone surrogates, which UTF-8 cannot
# carry) whose normalised form is not empty and which do not read as orders.
texts = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=300)


@settings(max_examples=300, suppress_health_check=[HealthCheck.filter_too_much])
@given(text=texts, kind=st.sampled_from(KINDS), seen=st.integers(1, 10**6),
       strength=st.floats(0, 1e6, allow_nan=False))
def test_round_trip_arbitrary_unicode(text: str, kind: str, seen: int, strength: float) -> None:
    assume(norm(text) and not is_imperative(text))
    rec = sign_lesson(KEY, kind=kind, text=text, seen=seen, strength=strength, updated=AT)
    again = parse(rec.raw)
    assert again.fields["text"] == text
    assert again.target == lesson_hash(kind, text)
    assert again.raw.decode("utf-8") == rec.line


@settings(max_examples=400)
@given(data=st.data())
def test_any_single_byte_change_is_refused(data: st.DataObject) -> None:
    text = data.draw(st.sampled_from([
        "The cache directory fills up after a week",
        "Der Build schlägt fehl, wenn LANG nicht gesetzt ist",
        'Quotes " and back\\slashes and\ttabs survive signing',
    ]))
    raw = bytearray(data.draw(st.sampled_from([
        lesson(text),
        lesson(text, seq=12, extra={"zz": [1, {"a": None}]}),
        sign_confirm(KEY, lesson_hash("error", text), at=AT).raw,
        sign_revoke(KEY, lesson_hash("error", text), at=AT, seq=2).raw,
    ])))
    at = data.draw(st.integers(0, len(raw) - 1))
    new = data.draw(st.integers(0, 255).filter(lambda b: b != raw[at]))
    raw[at] = new
    with pytest.raises(RecordError):
        parse(bytes(raw))


@settings(max_examples=60, deadline=None)
@given(extra=st.dictionaries(st.text(st.characters(codec="ascii", exclude_characters='"\\'), min_size=1, max_size=6),
                             st.one_of(st.integers(), st.text(max_size=8), st.lists(st.integers(), max_size=3)),
                             max_size=4))
def test_property_one_signed_message_has_exactly_one_line(extra: dict[str, object]) -> None:
    # Insert the sig member before every top-level member and at the end: of all these lines,
    # which all cut to the same signed bytes, exactly one verifies (the one the signer sent).
    assume("sig" not in extra and not set(extra) & {"v", "hash", "origin", "key", "kind", "text", "seen", "strength",
                                                   "updated", "seq", "confirm", "revoke", "refute"})
    raw = lesson(extra=extra)
    fields = json.loads(raw)
    member = b'"sig":"' + fields["sig"].encode() + b'"'
    cut = raw.replace(b"," + member, b"") if b"," + member in raw else raw.replace(member + b",", b"")
    keys = [k for k in fields if k != "sig"]
    lines = {b"{" + member + b"," + cut[1:], cut[:-1] + b"," + member + b"}"}
    for k in keys[1:]:
        at = cut.index(b"," + json.dumps(k, ensure_ascii=False).encode() + b":")
        lines.add(cut[:at] + b"," + member + cut[at:])
    accepted = []
    for line in lines:
        try:
            accepted.append(parse(line).raw)
        except RecordError as exc:
            assert exc.code == "bad-signature"
    assert accepted == [raw]
