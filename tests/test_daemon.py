"""neverestd as a real process: its control socket, its doors, its schedules, its signals."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from neverest.control import SOCKET_FILE, ControlError, ask, running
from neverest.ctl import main as ctl
from neverest.memory.store import open_store

# On development and CI machines nothing may leave loopback: peers on 127.0.0.1, zeroconf on it only.
LOOPBACK = ["--listen", "127.0.0.1:0", "--mdns-interface", "127.0.0.1"]


def wait_for(predicate, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text('inbox_every_s = 0.2\nsleep_at = "03:00"\n')
    env = dict(os.environ, NEVEREST_HOME=str(home))
    proc = subprocess.Popen([sys.executable, "-m", "neverest.daemon", *LOOPBACK], env=env, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: running(home))
        yield home, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_control_socket_is_private_and_answers(daemon: tuple[Path, subprocess.Popen[bytes]]) -> None:
    home, _ = daemon
    assert stat.S_IMODE((home / SOCKET_FILE).stat().st_mode) == 0o600
    status = ask(home, {"op": "status"})["status"]
    assert status["uptime_s"] >= 0 and len(status["origin"]) == 16 and status["next_sleep"]
    with pytest.raises(ControlError, match="unknown op"):
        ask(home, {"op": "bogus"})


def test_events_through_the_socket_are_stored_before_the_answer(daemon: tuple[Path, subprocess.Popen[bytes]]
                                                                ) -> None:
    home, proc = daemon
    answer = ask(home, {"op": "remember", "events": [
        {"kind": "correction", "said": "keep commits small", "session": "s1"},
        {"kind": "nope"},
    ]})
    assert answer["result"]["stored"] == 1 and len(answer["result"]["refused"]) == 1
    proc.send_signal(signal.SIGKILL)  # acknowledged means committed: a kill -9 loses nothing
    proc.wait(timeout=30)
    with open_store(home) as store:
        assert store.db.execute("SELECT count(*) FROM episodes").fetchone()[0] == 1


def test_the_inbox_is_watched(daemon: tuple[Path, subprocess.Popen[bytes]]) -> None:
    home, _ = daemon
    fd = os.open(home / "inbox.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, json.dumps({"kind": "note", "text": "the build uses make"}).encode() + b"\n")
    os.close(fd)

    def stored() -> bool:
        with open_store(home) as store:
            return bool(store.db.execute("SELECT count(*) FROM episodes").fetchone()[0] == 1)
    wait_for(stored, 15)


def test_sleep_now_and_status_through_neverestctl(daemon: tuple[Path, subprocess.Popen[bytes]],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    home, _ = daemon
    for session in ("a", "b"):
        ask(home, {"op": "remember", "events": [
            {"kind": "error", "title": "make", "happened": "fails without GNU make 4", "session": session}]})
    report = ask(home, {"op": "sleep"})["report"]
    assert len(report["learned"]) == 1
    assert ctl(["--home", str(home), "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    # The last sleep comes from the store, once: no "none yet" beside a date.
    assert status["last_sleep"] == report["started"] and status["lessons"] == 1 and "last_sleep" not in status["daemon"]


def test_garbage_on_the_socket_gets_an_error_and_the_daemon_goes_on(daemon: tuple[Path, subprocess.Popen[bytes]]
                                                                   ) -> None:
    home, _ = daemon
    for payload in (b"\xff\xfe not json\n", b"[1, 2]\n", b'{"op": "remember", "events": "x"}\n'):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(home / SOCKET_FILE))
            sock.sendall(payload)
            answer = json.loads(sock.makefile("rb").readline())
        assert answer["ok"] is False and answer["error"]
    assert running(home)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signals_stop_it_cleanly(daemon: tuple[Path, subprocess.Popen[bytes]], signum: int) -> None:
    home, proc = daemon
    proc.send_signal(signum)
    assert proc.wait(timeout=30) == 0
    assert not (home / SOCKET_FILE).exists()
    assert proc.stderr is not None and b"shutting down" in proc.stderr.read()


def test_bad_configuration_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('sleep_at = "25:99"\n')
    done = subprocess.run([sys.executable, "-m", "neverest.daemon", "--home", str(tmp_path), *LOOPBACK],
                          capture_output=True,
                          timeout=60)
    assert done.returncode == 1 and b"sleep_at" in done.stderr


def test_logs_can_be_json(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(tmp_path), "--log-json", *LOOPBACK],
                            stderr=subprocess.PIPE)
    try:
        wait_for(lambda: running(tmp_path))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    lines = [json.loads(line) for line in proc.stderr.read().splitlines()]
    assert {"at", "level", "message"} <= set(lines[0]) and any("shutting down" in x["message"] for x in lines)


def test_the_directory_is_polled(tmp_path: Path) -> None:
    listing = tmp_path / "peers.json"
    listing.write_text(json.dumps(["http://127.0.0.1:7999", {"url": "http://127.0.0.1:7998", "origin": "ab" * 8}]))
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(f'directory = "{listing}"\ndirectory_every_s = 0.2\n')
    proc = subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(home), *LOOPBACK],
                            stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: running(home))

        def listed() -> bool:
            peers = ask(home, {"op": "status"})["status"]["peers"]
            return {(p["url"], p["source"]) for p in peers} == {("http://127.0.0.1:7999", "directory"),
                                                                ("http://127.0.0.1:7998", "directory")}
        wait_for(listed, 15)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
