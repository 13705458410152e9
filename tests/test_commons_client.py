"""The commons client against the real commons server on 127.0.0.1: push, pull only what changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from neverest.control import ask, running
from neverest.ctl import main as ctl
from neverest.identity import load_or_create
from neverest.peers.directory import fetch

ERROR = ["--kind", "error", "--title", "pip install -e .", "--happened", "fails without --no-build-isolation"]
TOKEN = "test-token-0123456789"


@pytest.fixture
def commons(tmp_path: Path) -> Iterator[str]:
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKEN + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "neverest.transports.commons_server", "--listen", "127.0.0.1:0",
                             "--data", str(tmp_path / "data"), "--tokens", str(tokens)],
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        url = None
        deadline = time.monotonic() + 60
        assert proc.stderr is not None
        while url is None:  # the server says where it listens on its first lines
            assert time.monotonic() < deadline and proc.poll() is None
            line = proc.stderr.readline()
            for word in line.split():
                if word.startswith("http://127.0.0.1:"):
                    url = word.rstrip(",;.")
        # Keep reading its log, so that a full pipe never stalls the server.
        threading.Thread(target=proc.stderr.read, daemon=True).start()
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def run(capsys: pytest.CaptureFixture[str], home: Path, *argv: str) -> str:
    home.mkdir(mode=0o700, exist_ok=True)  # a named home must exist (only `init` or the default creates one)
    status = ctl(["--home", str(home), *argv])
    out = capsys.readouterr().out
    assert status == 0, (argv, out)
    return out


def test_push_then_pull_only_what_changed(commons: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEVEREST_NOW", "2026-03-01T09:00:00Z")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    a, b, project = tmp_path / "A", tmp_path / "B", tmp_path / "project"
    project.mkdir()
    for session in ("s1", "s2"):
        run(capsys, a, "remember", *ERROR, "--cwd", str(project), "--session", session)
    run(capsys, a, "publish", "--project", str(project))
    run(capsys, a, "sleep")
    pushed = json.loads(run(capsys, a, "commons", "push", commons, "--token-file", str(token_file), "--json"))
    assert pushed["records"] == 1 and pushed["conflict"] is None

    first = json.loads(run(capsys, b, "commons", "pull", commons, "--token-file", str(token_file), "--json"))
    assert (first["index_requests"], first["file_requests"], first["total"]["accepted"]) == (1, 1, 1)
    [held] = [json.loads(line) for line in run(capsys, b, "lessons", "--json").splitlines()]
    assert held["state"] == "candidate" and held["text"].startswith("pip install")
    # Up to date: one index request, answered 304, no file request.
    again = json.loads(run(capsys, b, "commons", "pull", commons, "--token-file", str(token_file), "--json"))
    assert (again["index_requests"], again["file_requests"]) == (1, 0)
    # B pushes its own (empty) file; A pulls: only B's file is fetched, not its own.
    run(capsys, b, "commons", "push", commons, "--token-file", str(token_file))
    a_pull = json.loads(run(capsys, a, "commons", "pull", commons, "--token-file", str(token_file), "--json"))
    assert a_pull["file_requests"] == 1


def test_a_wrong_token_is_a_clear_error(commons: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad"
    bad.write_text("not-the-token\n")
    (tmp_path / "A").mkdir(mode=0o700)
    assert ctl(["--home", str(tmp_path / "A"), "commons", "pull", commons, "--token-file", str(bad)]) == 1
    assert "403" in capsys.readouterr().err
    assert ctl(["--home", str(tmp_path / "A"), "commons", "pull", commons]) == 2


def test_two_writers_of_one_origin_do_not_overwrite_silently(commons: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEVEREST_NOW", "2026-03-01T09:00:00Z")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    a, project = tmp_path / "A", tmp_path / "project"
    project.mkdir()
    run(capsys, a, "commons", "push", commons, "--token-file", str(token_file))  # version 1: no records
    stale = tmp_path / "A-backup"
    shutil.copytree(a, stale)  # a backup that remembers version 1
    for session in ("s1", "s2"):
        run(capsys, a, "remember", *ERROR, "--cwd", str(project), "--session", session)
    run(capsys, a, "publish", "--project", str(project))
    run(capsys, a, "sleep")
    assert json.loads(run(capsys, a, "commons", "push", commons, "--token-file", str(token_file),
                          "--json"))["records"] == 1  # version 2
    # The restored backup pushes with its stale ETag: refused (412), reported, written once more.
    out = json.loads(run(capsys, stale, "commons", "push", commons, "--token-file", str(token_file), "--json"))
    assert out["conflict"] and "another version" in out["conflict"]


def test_the_daemon_pushes_pulls_and_announces_after_each_sleep(commons: str, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    home = tmp_path / "D"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(
        f'commons_url = "{commons}"\ncommons_token_file = "{token_file}"\n'
        f'commons_announce = "http://127.0.0.1:7428"\n')
    proc = subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(home), "--listen",
                             "127.0.0.1:0", "--no-mdns"], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not running(home):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        report = ask(home, {"op": "sleep"})["report"]
        assert "error" not in report["commons"], report["commons"]
        assert report["commons"]["pull"]["index_requests"] == 1 and report["commons"]["announced"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    directory_file = tmp_path / "dir.json"
    with httpx.Client() as http:
        directory_file.write_bytes(http.get(commons + "/directory",
                                            headers={"authorization": f"Bearer {TOKEN}"}).content)
    assert fetch(str(directory_file)).peers == [("http://127.0.0.1:7428", load_or_create(home).origin)]
