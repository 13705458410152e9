"""Defects a new user met with neverestd, each reproduced against a real daemon process.

- a second daemon on one home started, and on its way out deleted the first one's socket;
- a mistyped --home made a new memory with a new identity; a --home naming a file was a traceback;
- memory.db and its -wal/-shm were born 0644 in a home that was 0755;
- a deeply nested JSON request on the control socket killed the daemon;
- what only a running daemon can tell (health, metrics) had no place on its listener;
- the log could be neither filtered nor written to a file.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from neverest.control import SOCKET_FILE, ask, running

NO_NETWORK = ["--listen", "127.0.0.1:0", "--no-mdns"]


def wait_for(predicate, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def start(home: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(home), *NO_NETWORK, *args],
                            stderr=subprocess.PIPE, text=True)


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    proc = start(home)
    try:
        wait_for(lambda: running(home))
        yield home, proc
    finally:
        stop(proc)


def test_a_second_daemon_on_one_home_is_refused_and_leaves_the_first_alone(
        daemon: tuple[Path, subprocess.Popen[str]]) -> None:
    home, first = daemon
    second = start(home)
    _, err = second.communicate(timeout=30)
    assert second.returncode == 1
    assert "already runs on" in err and f"pid {first.pid}" in err and "Traceback" not in err
    # The first one's socket is still there, and it still answers.
    assert (home / SOCKET_FILE).exists() and ask(home, {"op": "status"})["status"]["pid"] == first.pid


def test_a_home_that_does_not_exist_or_is_a_file_is_refused(tmp_path: Path) -> None:
    typo = tmp_path / "hmoe"
    done = subprocess.run([sys.executable, "-m", "neverest.daemon", "--home", str(typo), *NO_NETWORK],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "neverestctl init --home" in done.stderr and not typo.exists()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    done = subprocess.run([sys.executable, "-m", "neverest.daemon", "--home", str(a_file), *NO_NETWORK],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "is a file" in done.stderr and "Traceback" not in done.stderr
    # The same rule at the command line, and `init` as the way to make one.
    done = subprocess.run([sys.executable, "-m", "neverest.ctl", "--home", str(typo), "status"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and not typo.exists()
    done = subprocess.run([sys.executable, "-m", "neverest.ctl", "--home", str(typo), "init"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and (typo / "identity.key").exists()


def test_everything_in_a_home_is_private_whatever_its_mode(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    os.chmod(home, 0o755)
    (home / "config.toml").write_text("inbox_every_s = 0.2\n")
    os.chmod(home / "config.toml", 0o644)
    proc = start(home)
    try:
        wait_for(lambda: running(home))
        ask(home, {"op": "remember", "events": [{"kind": "error", "title": "make", "happened": "no rule"}]})
        wait_for(lambda: (home / "memory.db-wal").exists())
        for path in home.iterdir():
            if path.is_symlink():
                continue
            mode = stat.S_IMODE(path.stat().st_mode)
            assert mode & 0o077 == 0, f"{path.name} is {mode:o}"
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
    finally:
        stop(proc)


def test_no_control_request_stops_the_daemon(daemon: tuple[Path, subprocess.Popen[str]]) -> None:
    home, proc = daemon
    hostile = [b"[" * 200_000 + b"\n", b'{"op": ' + b"[" * 100_000 + b"\n", b'{"op": "status"' + b"}" * 50_000,
               b'{"op": "forget", "session": ["x"]}\n', b'{"op": "revoke", "hash": "zz"}\n', b"\x00\xff\n"]
    for payload in hostile:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(home / SOCKET_FILE))
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert b'"ok": false' in answer, payload[:40]
        assert proc.poll() is None
    assert ask(home, {"op": "status"})["status"]["pid"] == proc.pid


def test_health_and_metrics_on_the_listener(daemon: tuple[Path, subprocess.Popen[str]]) -> None:
    home, _ = daemon
    url = ask(home, {"op": "status"})["status"]["listen"][0]
    with httpx.Client(timeout=10) as client:
        health = client.get(f"{url}/healthz")
        assert health.status_code == 200 and health.text.strip() == "ok"
        metrics = client.get(f"{url}/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    lines = metrics.text.splitlines()
    assert "# TYPE neverest_records gauge" in lines and "neverest_records 0" in lines
    assert any(line.startswith("neverest_uptime_seconds ") for line in lines)
    assert client.is_closed


def test_log_level_and_log_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    log = tmp_path / "neverestd.log"
    proc = start(home, "--log-file", str(log), "--log-level", "warning")
    try:
        wait_for(lambda: running(home))
    finally:
        stop(proc)
    assert proc.stderr is not None and proc.stderr.read() == ""  # everything went to the file
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    text = log.read_text()
    assert "ready as" not in text  # an INFO line, below the level asked for
    proc = start(home, "--log-file", str(log), "--log-level", "info")
    try:
        wait_for(lambda: running(home))
    finally:
        stop(proc)
    assert "ready as" in log.read_text()
    done = subprocess.run([sys.executable, "-m", "neverest.daemon", "--home", str(home), *NO_NETWORK,
                           "--log-level", "loud"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "invalid choice" in done.stderr


def test_adding_oneself_as_a_peer_is_refused(daemon: tuple[Path, subprocess.Popen[str]],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from neverest.ctl import main as ctl

    home, _ = daemon
    url = ask(home, {"op": "status"})["status"]["listen"][0]
    assert ctl(["--home", str(home), "peer", "add", url.removeprefix("http://")]) == 2
    assert "this memory's own daemon" in capsys.readouterr().err
    assert ask(home, {"op": "status"})["status"]["peers"] == []
    # Asked to gossip with it anyway, the daemon finds itself after one round trip and marks the address;
    # from then on the address is refused.
    assert ctl(["--home", str(home), "gossip", "--peer", url, "--json"]) == 0
    [result] = json.loads(capsys.readouterr().out)["round"]
    assert result["self"] and result["round_trips"] == 1 and result["records_sent"] == 0
    assert ctl(["--home", str(home), "gossip", "--peer", url]) == 2
    assert "own" in capsys.readouterr().err
    assert ctl(["--home", str(home), "peer", "add", url]) == 2
