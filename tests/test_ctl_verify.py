"""The `neverestctl id` and `neverestctl verify` contracts, in-process and as subprocesses."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import nacl.signing
import pytest

from neverest.ctl import main
from neverest.records import MAX_RECORD_BYTES, sign_confirm, sign_lesson
from tests.conftest import VECTORS

AT = "2026-11-21T03:00:00.000000Z"
KEY = nacl.signing.SigningKey(bytes(32))
GOOD = sign_lesson(KEY, kind="error", text="Builds fail when LANG is unset", seen=1, strength=1.0,
                   updated=AT).raw
CONFIRM = sign_confirm(KEY, "ab" * 16, at=AT).raw
VERDICT_KEYS = {"line", "ok", "type", "hash", "origin", "reason", "message"}


def run_verify(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], data: bytes,
               *argv: str) -> tuple[int, list[dict[str, object]]]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    status = main(["verify", *argv])
    out = capsys.readouterr().out
    return status, [json.loads(line) for line in out.splitlines()]


def test_all_good_lines_exit_0(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    status, verdicts = run_verify(monkeypatch, capsys, GOOD + b"\n" + CONFIRM + b"\n")
    assert status == 0
    assert [v["type"] for v in verdicts] == ["lesson", "confirm"]
    assert all(set(v) == VERDICT_KEYS and v["ok"] and v["reason"] is None for v in verdicts)
    assert verdicts[1]["hash"] == "ab" * 16


def test_line_numbers_count_blank_lines_and_bad_lines_do_not_stop_the_rest(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = b"\n" + GOOD + b"\n\n   \n{not json\n" + b"\xff\xfe\n" + GOOD[:-1] + b"x\r\n" + CONFIRM
    status, verdicts = run_verify(monkeypatch, capsys, data)
    assert status == 1
    assert [(v["line"], v["ok"], v["reason"]) for v in verdicts] == [
        (2, True, None),
        (5, False, "not-json"),
        (6, False, "bad-encoding"),
        (7, False, "not-json"),
        (8, True, None),
    ]


def test_refused_line_reports_what_it_claims(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    fields = json.loads(GOOD)
    fields["seen"] = 5  # signature no longer matches
    line = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    status, [verdict] = run_verify(monkeypatch, capsys, line)
    assert status == 1
    assert verdict["type"] == "lesson" and verdict["hash"] == fields["hash"]
    assert verdict["origin"] == fields["origin"] and verdict["reason"] == "bad-signature"
    assert isinstance(verdict["message"], str) and verdict["message"]


def test_huge_line_is_refused_and_reading_goes_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big.jsonl"
    with path.open("wb") as f:
        f.write(GOOD + b"\n")
        f.write(b'{"text":"' + b"a" * (50 * 1024 * 1024) + b'"}\n')
        f.write(b"x" * (MAX_RECORD_BYTES + 1))  # oversize last line without newline
        f.write(b"\n" + GOOD)
    assert main(["verify", str(path)]) == 1
    verdicts = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(v["line"], v["reason"]) for v in verdicts] == [(1, None), (2, "too-large"), (3, "too-large"),
                                                            (4, None)]


def test_vector_file_verdicts_match_expectations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [json.loads(line) for line in (VECTORS / "records.jsonl").read_text().splitlines()]
    path = tmp_path / "vectors.jsonl"
    path.write_text("".join(c["line"] + "\n" for c in cases), encoding="utf-8")
    assert main(["verify", str(path)]) == 1
    verdicts = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [v["ok"] for v in verdicts] == [c["expect"] == "accept" for c in cases]


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    assert main(["verify", "--no-such-flag"]) == 2
    assert main([]) == 2


def test_id_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(tmp_path), "id", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["--home", str(tmp_path), "id", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == first
    assert len(first["origin"]) == 16 and len(first["key"]) == 64


def test_id_refuses_a_key_others_can_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(tmp_path), "id"]) == 0
    os.chmod(tmp_path / "identity.key", 0o644)
    assert main(["--home", str(tmp_path), "id"]) == 1
    assert "chmod 600" in capsys.readouterr().err


def test_subprocess_contract(tmp_path: Path) -> None:
    """The installed console script, as other programs call it: stdin in, JSON lines out."""
    env = dict(os.environ, NEVEREST_HOME=str(tmp_path / "home"))
    (tmp_path / "home").mkdir(mode=0o700)
    cmd = [sys.executable, "-m", "neverest.ctl"]
    done = subprocess.run([*cmd, "verify"], input=GOOD + b"\n\nnope\n", capture_output=True, env=env,
                          timeout=60)
    assert done.returncode == 1
    verdicts = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(v["line"], v["ok"]) for v in verdicts] == [(1, True), (3, False)]
    done = subprocess.run([*cmd, "verify", "-"], input=GOOD, capture_output=True, env=env, timeout=60)
    assert done.returncode == 0
    done = subprocess.run([*cmd, "id", "--json"], capture_output=True, env=env, timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout)["origin"]
    assert (tmp_path / "home" / "identity.key").exists()
    done = subprocess.run([*cmd, "bogus"], capture_output=True, env=env, timeout=60)
    assert done.returncode == 2
