"""neverestctl doctor: each check on a healthy home and on homes broken in one way each."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nacl.signing
import pytest

from neverest.clock import iso
from neverest.commands.doctor import check_port, cmd_doctor
from neverest.config import Config
from neverest.control import running
from neverest.ctl import build_parser, runner
from neverest.identity import load_or_create
from neverest.memory.receive import receive
from neverest.memory.store import open_store
from neverest.paths import init_home, private_umask
from neverest.records import sign_lesson

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NEVEREST_NOW", iso(NOW))
    for name in list(os.environ):
        if name.startswith("NEVEREST_") and name != "NEVEREST_NOW":
            monkeypatch.delenv(name)
    home = init_home(tmp_path / "home")
    with private_umask():  # as neverestctl runs
        load_or_create(home)
        open_store(home).close()
        (home / "config.toml").write_text(f'listen = "127.0.0.1:{free_port()}"\nmdns = false\n'
                                          'peers = ["http://127.0.0.1:9"]\n')
    return home


def doctor(home: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, dict[str, str]]]:
    status = cmd_doctor(argparse.Namespace(home=str(home), json=True))
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is (status == 0)
    return status, {c["name"]: c for c in out["checks"]}


def states(checks: dict[str, dict[str, str]]) -> dict[str, str]:
    return {name: c["status"] for name, c in checks.items()}


def test_a_healthy_home(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, checks = doctor(home, capsys)
    assert status == 0
    assert states(checks) == {"home": "ok", "config": "ok", "key": "ok", "store": "ok", "daemon": "warn",
                              "port": "ok", "peers": "ok", "clock": "ok"}
    assert checks["key"]["message"].startswith(f"origin {load_or_create(home).origin}")
    assert "not running" in checks["daemon"]["message"] and checks["daemon"]["hint"]
    # Readable output: one line per check, a hint under each that is not ok.
    assert cmd_doctor(argparse.Namespace(home=str(home), json=False)) == 0
    text = capsys.readouterr().out
    assert "ok    key     origin" in text and "warn  daemon  not running" in text and "-> start `neverestd`" in text


def test_a_key_others_can_read_fails(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.chmod(home / "identity.key", 0o644)
    status, checks = doctor(home, capsys)
    assert status == 1 and checks["key"]["status"] == "fail"
    assert f"chmod 600 {home / 'identity.key'}" in checks["key"]["hint"]
    assert stat.S_IMODE((home / "identity.key").stat().st_mode) == 0o644  # the doctor changes nothing


def test_a_key_that_holds_no_seed_fails(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "identity.key").write_text("not a key\n")
    status, checks = doctor(home, capsys)
    assert status == 1 and "64-hex-digit" in checks["key"]["message"]


def test_a_corrupt_store_fails(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "memory.db").write_bytes(b"this is not a database\n" * 400)
    status, checks = doctor(home, capsys)
    assert status == 1 and checks["store"]["status"] == "fail"
    assert "backup" in checks["store"]["hint"]


def test_a_store_with_a_damaged_page_fails_its_integrity_check(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with sqlite3.connect(home / "memory.db") as db:
        db.execute("PRAGMA journal_mode = DELETE")
        db.execute("CREATE TABLE filler (x TEXT)")
        db.execute("CREATE INDEX filler_x ON filler(x)")
        db.executemany("INSERT INTO filler VALUES (?)", [(f"row {i:06d}" * 4,) for i in range(3000)])
    db.close()
    size = (home / "memory.db").stat().st_size
    db = sqlite3.connect(home / "memory.db")
    page = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    with open(home / "memory.db", "r+b") as f:  # scribble over a b-tree page's header in the middle of the file
        f.seek(size // 2 // page * page)
        f.write(b"\xff" * 64)
    status, checks = doctor(home, capsys)
    assert status == 1 and checks["store"]["status"] == "fail", checks["store"]


def test_a_store_from_a_newer_release_fails(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with sqlite3.connect(home / "memory.db") as db:
        db.execute("PRAGMA user_version = 999")
    db.close()
    status, checks = doctor(home, capsys)
    assert status == 1 and "newer Neverest" in checks["store"]["message"]


def test_the_doctor_writes_nothing(tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (home / "memory.db").unlink()
    (home / "identity.key").unlink()
    status, checks = doctor(home, capsys)
    assert status == 0 and checks["store"]["status"] == "warn" and checks["key"]["status"] == "warn"
    assert sorted(os.listdir(home)) == ["config.toml"]
    missing = tmp_path / "typo"
    status, checks = doctor(missing, capsys)
    assert status == 1 and list(checks) == ["home"]
    assert f"neverestctl init --home {missing}" in checks["home"]["hint"]
    assert not missing.exists()


def test_an_open_home_fails_and_is_left_as_it_was(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.chmod(home, 0o755)
    status, checks = doctor(home, capsys)
    assert status == 1 and checks["home"]["status"] == "fail" and "0755" in checks["home"]["message"]
    assert stat.S_IMODE(home.stat().st_mode) == 0o755
    os.chmod(home, 0o700)
    os.chmod(home / "memory.db", 0o644)
    status, checks = doctor(home, capsys)
    assert status == 0 and checks["home"]["status"] == "warn" and "memory.db (0644)" in checks["home"]["message"]


def test_a_port_held_by_another_program_fails(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        port = other.getsockname()[1]
        (home / "config.toml").write_text(f'listen = "127.0.0.1:{port}"\nmdns = false\n')
        status, checks = doctor(home, capsys)
    assert status == 1 and checks["port"]["status"] == "fail" and "in use" in checks["port"]["message"]
    assert checks["peers"]["status"] == "warn"  # no peer, no zeroconf, nothing to share with


def test_trust_any_and_a_bad_config(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with (home / "config.toml").open("a") as f:
        f.write('trust = "any"\n')
    status, checks = doctor(home, capsys)
    assert status == 0 and checks["config"]["status"] == "warn" and 'trust = "any"' in checks["config"]["message"]
    (home / "config.toml").write_text("fanout = [\n")
    status, checks = doctor(home, capsys)
    assert status == 1 and checks["config"]["status"] == "fail"


def test_records_from_the_future_warn_of_clock_skew(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = nacl.signing.SigningKey(bytes([7]) * 32)
    ahead = sign_lesson(key, kind="error", text="a lesson from a fast clock", seen=1, strength=1.0,
                        updated=iso(NOW + timedelta(hours=2)), seq=1).raw
    with open_store(home) as store:
        receive(store, [ahead], source="folder", own_origin=load_or_create(home).origin, config=Config(), now=NOW)
    status, checks = doctor(home, capsys)
    assert status == 0 and checks["clock"]["status"] == "warn"
    assert "future from folder" in checks["clock"]["message"] and "NTP" in checks["clock"]["hint"]


def test_a_running_daemon_and_its_port(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NEVEREST_NOW"}
    proc = subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(home), "--no-mdns"], env=env,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not running(home):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        status, checks = doctor(home, capsys)
        assert status == 0
        assert checks["daemon"]["status"] == "ok" and "running" in checks["daemon"]["message"]
        assert checks["port"] == {"name": "port", "status": "ok", "hint": "",
                                  "message": f"{checks['port']['message'].split()[0]} is held by this memory's daemon"}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_a_daemon_started_with_its_own_listen_and_no_mdns_is_reported_as_it_runs(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # config.toml says one port and zeroconf on; the daemon was started with --listen elsewhere and --no-mdns.
    configured, actual = free_port(), free_port()
    (home / "config.toml").write_text(f'listen = "127.0.0.1:{configured}"\nmdns = true\n')
    env = {k: v for k, v in os.environ.items() if k != "NEVEREST_NOW"}
    proc = subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(home), "--no-mdns",
                             "--listen", f"127.0.0.1:{actual}"], env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not running(home):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        status, checks = doctor(home, capsys)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert status == 0 and checks["port"]["status"] == "ok"
    message = checks["port"]["message"]
    assert message.startswith(f"http://127.0.0.1:{actual} is held by this memory's daemon, started with --listen")
    assert f"127.0.0.1:{configured} is free" not in message
    assert "zeroconf off" in checks["peers"]["message"]


def test_where_a_daemon_that_does_not_answer_listens_is_read_from_its_lock_file(home: Path) -> None:
    (home / "daemon.lock").write_text(json.dumps({"pid": os.getpid(), "since": "2026-03-01T12:00:00Z",
                                                  "about": "listening on http://127.0.0.1:7999"}) + "\n")
    check = check_port(Config(listen="127.0.0.1:7428"), None, home)
    assert check.status == "ok" and check.message.startswith("http://127.0.0.1:7999 is held by this memory's daemon")


def test_the_subcommand_parses() -> None:
    args = build_parser().parse_args(["doctor", "--json"])
    assert runner(args.func) is cmd_doctor and args.json is True
