"""The folder transport against hostile and half-written files, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import nacl.signing
import pytest

from neverest.ctl import main
from neverest.records import sign_lesson

AT = "2026-04-01T12:00:00.000000Z"
KEY = nacl.signing.SigningKey(b"\x07" * 32)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0, argv
    return capsys.readouterr().out


def lesson(text: str, seq: int) -> bytes:
    return sign_lesson(KEY, kind="error", text=text, seen=1, strength=1.0, updated=AT, seq=seq).raw


def test_hostile_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEVEREST_NOW", "2026-04-01T12:05:00Z")
    folder, home = tmp_path / "shared", tmp_path / "B"
    home.mkdir(mode=0o700)
    folder.mkdir()
    good = lesson("Port 8080 is taken by the proxy on this host", 1)
    hostile = folder / ("ab" * 8 + ".jsonl")
    hostile.write_bytes(b"\n".join([
        good, good,  # a replay
        b"\x00\xff binary garbage",
        b'{"v":1,"hash":',  # truncated
        b'{"v":1,"text":"' + b"a" * 40_000 + b'"}',  # oversized
        lesson("Docker builds fail when the disk is full", 1),  # a fork: same seq, other record
        good.replace(b"8080", b"8081"),  # tampered
    ]) + b"\n" + lesson("The CI runner has no IPv6", 2)[:50])  # a line still being written
    (folder / "notes.txt").write_text("not a memory's file")
    result = json.loads(run(capsys, "--home", str(home), "folder", "sync", str(folder), "--json"))
    total = result["total"]
    assert total["accepted"] == 1 and total["duplicates"] == 1 and total["forks"] == 1
    assert total["refused"] == {"bad-encoding": 1, "not-json": 2, "too-large": 1, "fork": 1, "hash-mismatch": 1}
    status = json.loads(run(capsys, "--home", str(home), "status", "--json"))
    by_reason = {r["reason"]: r["count"] for r in status["refused"] if r["source"] == f"folder:{hostile.name}"}
    assert by_reason["too-large"] == 1 and by_reason["fork"] == 1
    assert status["forks"] == 1 and status["records"] == 1

    # The writer finishes its line: the next sync reads it, and nothing else changes.
    with hostile.open("ab") as f:
        f.write(lesson("The CI runner has no IPv6", 2)[50:] + b"\n")
    again = json.loads(run(capsys, "--home", str(home), "folder", "sync", str(folder), "--json"))["total"]
    assert again["accepted"] == 1 and again["duplicates"] == 2  # the good line and its replay
    texts = [json.loads(line)["text"] for line in run(capsys, "--home", str(home), "lessons", "--json").splitlines()]
    assert sorted(texts) == ["Port 8080 is taken by the proxy on this host", "The CI runner has no IPv6"]
    # This memory's own file was written atomically: no temporary file is left behind.
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []


def test_corrections_stay_private_unless_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEVEREST_NOW", "2026-04-01T12:00:00Z")
    home, project, folder = tmp_path / "A", tmp_path / "proj", tmp_path / "shared"
    home.mkdir(mode=0o700)
    project.mkdir()
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    for cwd, session in ((project, "s1"), (elsewhere, "s2")):
        run(capsys, "--home", str(home), "remember", "--kind", "correction", "--said", "keep commits small",
            "--cwd", str(cwd), "--session", session)
    for session in ("e1", "e2"):
        run(capsys, "--home", str(home), "remember", "--kind", "error", "--title", "make", "--happened",
            "fails without GNU make 4", "--cwd", str(elsewhere), "--session", session)
    run(capsys, "--home", str(home), "sleep")
    assert json.loads(run(capsys, "--home", str(home), "publish", "--project", str(project), "--json"))["signed"] == 0
    # The error lesson was learned outside the published project; the correction needs --corrections.
    out = json.loads(run(capsys, "--home", str(home), "publish", "--project", str(project), "--corrections",
                         "--json"))
    assert out["signed"] == 1
    run(capsys, "--home", str(home), "folder", "sync", str(folder))
    [mine] = list(folder.iterdir())
    [record] = [json.loads(line) for line in mine.read_text().splitlines()]
    assert record["kind"] == "correction" and "episode" not in json.dumps(record) and str(tmp_path) not in json.dumps(
        record)
    run(capsys, "--home", str(home), "unpublish", "--project", str(project))
    assert json.loads(run(capsys, "--home", str(home), "status", "--json"))["published_projects"] == []


def test_only_the_origin_can_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEVEREST_NOW", "2026-04-01T12:05:00Z")
    folder, home = tmp_path / "shared", tmp_path / "B"
    home.mkdir(mode=0o700)
    folder.mkdir()
    (folder / ("cd" * 8 + ".jsonl")).write_bytes(lesson("Port 8080 is taken by the proxy on this host", 1) + b"\n")
    run(capsys, "--home", str(home), "folder", "sync", str(folder))
    [held] = [json.loads(line) for line in run(capsys, "--home", str(home), "lessons", "--json").splitlines()]
    assert main(["--home", str(home), "revoke", held["hash"]]) == 2
    assert "only its origin can revoke" in capsys.readouterr().err
    assert main(["--home", str(home), "show", "ffffff"]) == 2
