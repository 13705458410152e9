"""A daemon killed with -9 in the middle of a round: its store stays consistent, what it took in
stays, and the next rounds complete the transfer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import nacl.signing

from neverest.control import ask, running
from neverest.ctl import main as ctl
from neverest.memory import holdings
from neverest.memory.store import open_store
from neverest.records import sign_lesson

NOW = datetime(2026, 4, 2, tzinfo=UTC)


def start(home: Path) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(home), "--listen", "127.0.0.1:0",
                             "--no-mdns"], stderr=subprocess.DEVNULL, env=dict(os.environ))
    deadline = time.monotonic() + 60
    while not running(home):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    return proc, "http://" + ask(home, {"op": "status"})["status"]["listen"][0].split("//")[-1]


def test_kill_9_mid_round(tmp_path: Path) -> None:
    source, sink = tmp_path / "source", tmp_path / "sink"
    source.mkdir(mode=0o700)
    sink.mkdir(mode=0o700)
    with open_store(source) as store, store.write() as db:  # 6 000 signed records from 60 origins
        for o in range(60):
            key = nacl.signing.SigningKey(bytes([o + 1]) * 32)
            for s in range(1, 101):
                record = sign_lesson(key, kind="error", text=f"Tool {o} fails in case {s}", seen=1, strength=1.0,
                                     updated="2026-04-01T12:00:00.000000Z", seq=s)
                holdings.put(db, record, source="test", now=NOW)
    procs = []
    try:
        src_proc, src_url = start(source)
        procs.append(src_proc)
        sink_proc, _ = start(sink)
        assert ctl(["--home", str(sink), "peer", "add", src_url]) == 0
        pull = subprocess.Popen([sys.executable, "-m", "neverest.ctl", "--home", str(sink), "gossip", "--json"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def held() -> int:
            with open_store(sink) as store:
                return int(store.db.execute("SELECT count(*) FROM records").fetchone()[0])
        deadline = time.monotonic() + 60
        while held() == 0:  # kill it once records have started to arrive
            assert time.monotonic() < deadline
            time.sleep(0.02)
        sink_proc.send_signal(signal.SIGKILL)
        sink_proc.wait()
        pull.wait(timeout=60)
        before = held()
        assert 0 < before < 6000, before
        with open_store(sink) as store:
            assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            # No hole: for every origin, the records held are exactly 1..n.
            for origin, n, top in store.db.execute("SELECT origin, count(*), max(seq) FROM records GROUP BY origin"):
                assert n == top, origin
        sink_proc, _ = start(sink)
        procs.append(sink_proc)
        for _ in range(20):
            ask(sink, {"op": "gossip"})
            if held() == 6000:
                break
        assert held() == 6000
        round_ = ask(sink, {"op": "gossip"})["round"]
        assert round_[0]["in_sync"], json.dumps(round_)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()

