"""Three real neverestd processes on 127.0.0.1, peers added by hand: a lesson published on
the first reaches the third through the second."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from neverest.control import running
from neverest.ctl import main as ctl
from tests.daemons import listening, spawn, stop

ERROR = ["--kind", "error", "--title", "pip install -e .", "--happened", "fails without --no-build-isolation"]


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[list[tuple[Path, str]]]:
    procs: list[subprocess.Popen[bytes]] = []
    homes = [tmp_path / name for name in "ABC"]
    try:
        for home in homes:
            home.mkdir(mode=0o700)
            # Loopback only, no zeroconf: the peers here are the ones added by hand.
            procs.append(spawn(home, "2026-03-01T09:00:00Z"))
        yield [(home, listening(home, proc)) for home, proc in zip(homes, procs, strict=True)]
    finally:
        stop(procs)


def run(capsys: pytest.CaptureFixture[str], home: Path, *argv: str) -> str:
    home.mkdir(mode=0o700, exist_ok=True)  # a named home must exist (only `init` or the default creates one)
    status = ctl(["--home", str(home), *argv])
    out = capsys.readouterr().out
    assert status == 0, (argv, out)
    return out


def test_a_lesson_travels_a_to_c_through_b(daemons: list[tuple[Path, str]], capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NEVEREST_NOW", "2026-03-01T09:00:00Z")
    (a, _), (b, url_b), (c, url_c) = daemons
    project = tmp_path / "project"
    project.mkdir()
    for session in ("s1", "s2"):
        run(capsys, a, "remember", *ERROR, "--cwd", str(project), "--session", session)
    run(capsys, a, "publish", "--project", str(project))
    run(capsys, a, "sleep")
    [lesson] = [json.loads(line) for line in run(capsys, a, "lessons", "--json").splitlines()]

    run(capsys, a, "peer", "add", url_b)
    run(capsys, b, "peer", "add", url_c)
    first = json.loads(run(capsys, a, "gossip", "--json"))["round"]
    assert [r["records_sent"] for r in first] == [1] and first[0]["error"] is None
    second = json.loads(run(capsys, b, "gossip", "--json"))["round"]
    # B also knows A now (A gossiped with it and said where it listens): only C needs the record.
    assert {r["url"]: r["records_sent"] for r in second}[url_c] == 1

    held = [json.loads(line) for line in run(capsys, c, "lessons", "--json").splitlines()]
    assert [(h["hash"], h["state"], h["origin"]) for h in held] == [(lesson["hash"], "candidate", lesson["origin"])]
    # Every record C holds arrived verified, through B, and says so.
    shown = json.loads(run(capsys, c, "show", lesson["hash"], "--json"))
    b_origin = json.loads(run(capsys, b, "id", "--json"))["origin"]
    assert [r["source"] for r in shown["records"]] == [f"gossip:{b_origin}"]
    # A learned B's origin from its signed answer; a second round finds them in sync.
    [peer] = [json.loads(line) for line in run(capsys, a, "peer", "list", "--json").splitlines()]
    assert peer["origin"] == b_origin and peer["score"] > 0
    again = json.loads(run(capsys, a, "gossip", "--json"))["round"]
    assert again[0]["in_sync"] and again[0]["round_trips"] == 1
    assert again[0]["bytes_sent"] + again[0]["bytes_received"] <= 1024


def test_the_cli_gossips_by_itself_when_no_daemon_runs(daemons: list[tuple[Path, str]], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEVEREST_NOW", "2026-03-01T09:00:00Z")
    url_b = daemons[1][1]
    lone, project = tmp_path / "lone", tmp_path / "p"
    project.mkdir()
    for session in ("s1", "s2"):
        run(capsys, lone, "remember", *ERROR, "--cwd", str(project), "--session", session)
    run(capsys, lone, "publish", "--project", str(project))
    run(capsys, lone, "sleep")
    assert not running(lone)
    [result] = json.loads(run(capsys, lone, "gossip", "--peer", url_b, "--json"))["round"]
    assert result["records_sent"] == 1 and result["peer"] is not None
    assert ctl(["--home", str(lone), "gossip", "--peer", "http://127.0.0.1:1"]) == 1  # nobody there: an error
    assert "unreachable" in capsys.readouterr().out


def test_hostile_requests_are_bounded_counted_and_refused(daemons: list[tuple[Path, str]],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    import httpx
    import msgpack

    (a, _), (b, url_b) = daemons[0], daemons[1]
    exchange = url_b + "/gossip/v1/exchange"
    with httpx.Client(timeout=10) as http:
        assert http.post(exchange, content=b"\x00garbage\xff").status_code == 400
        truncated = msgpack.packb({"v": 1, "t": 1, "a": {}, "b": b"x" * 100})[:40]
        assert http.post(exchange, content=truncated).status_code == 400
        # A body whose header claims a million-item array: refused (test_gossip_codec measures that
        # such headers allocate nothing)...
        huge = msgpack.packb({"v": 1, "t": 1, "a": {}, "b": b"\xdd\x00\x0f\x42\x41"})
        assert http.post(exchange, content=huge).status_code == 400
        assert http.get(url_b + "/anything").status_code == 404
    host, port = url_b.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:  # 1 GB announced, never sent
        sock.sendall(b"POST /gossip/v1/exchange HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n")
        assert b" 413 " in sock.recv(1024).split(b"\r\n")[0]
    # Meanwhile, honest peers are served as before.
    run(capsys, a, "peer", "add", url_b)
    assert json.loads(run(capsys, a, "gossip", "--json"))["round"][0]["error"] is None
    refused = {r["reason"]: r["count"] for r in json.loads(run(capsys, b, "status", "--json"))["refused"]
               if r["source"] == "gossip:127.0.0.1"}
    assert refused.get("bad-msgpack", 0) >= 2
