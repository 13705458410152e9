"""One daemon per home: the lock is held by one process at a time, names its holder, survives kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from neverest.lock import AlreadyRunning, DaemonLock, read_holder

HOLD = """
import sys, time
from pathlib import Path
from neverest.lock import AlreadyRunning, DaemonLock
lock = DaemonLock(Path(sys.argv[1]))
try:
    lock.acquire("listening on 127.0.0.1:7428")
except AlreadyRunning as exc:
    print(exc, flush=True)
    sys.exit(3)
print("locked", flush=True)
time.sleep(120)
"""


def hold(home: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(home)], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "locked":
        proc.kill()
        proc.wait(10)
        pytest.fail(f"the holder could not lock: {line!r}")
    return proc


def test_a_second_process_is_refused_with_the_holder_named(tmp_path: Path) -> None:
    first = hold(tmp_path)
    try:
        second = subprocess.run([sys.executable, "-c", HOLD, str(tmp_path)], capture_output=True, text=True,
                                timeout=60, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        assert second.returncode == 3
        assert f"pid {first.pid}" in second.stdout and "listening on 127.0.0.1:7428" in second.stdout
        with pytest.raises(AlreadyRunning) as caught:
            DaemonLock(tmp_path).acquire()
        message = str(caught.value)
        assert str(tmp_path) in message and f"pid {first.pid}" in message and "since 20" in message
        holder = read_holder(tmp_path)
        assert holder is not None and holder.pid == first.pid
    finally:
        first.kill()
        first.wait(10)


def test_the_lock_is_free_again_after_kill_9(tmp_path: Path) -> None:
    first = hold(tmp_path)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    lock = DaemonLock(tmp_path)
    lock.acquire("mine")  # no stale lock: the kernel released it with the process
    try:
        holder = read_holder(tmp_path)
        assert holder is not None and holder.pid == os.getpid() and holder.about == "mine"
        lock.describe("listening on 127.0.0.1:40000")
        holder = read_holder(tmp_path)
        assert holder is not None and holder.about == "listening on 127.0.0.1:40000"
    finally:
        lock.release()


def test_two_locks_in_one_process_conflict_and_release_frees(tmp_path: Path) -> None:
    with DaemonLock(tmp_path) as lock:
        assert lock.held
        assert (tmp_path / "daemon.lock").stat().st_mode & 0o077 == 0
        with pytest.raises(AlreadyRunning, match=f"pid {os.getpid()}"):
            DaemonLock(tmp_path).acquire()
    assert read_holder(tmp_path) is None  # a clean stop leaves no description behind
    with DaemonLock(tmp_path):
        pass


def test_a_garbled_lock_file_still_gives_a_message(tmp_path: Path) -> None:
    (tmp_path / "daemon.lock").write_bytes(b"\xff" * 10_000)
    assert read_holder(tmp_path) is None
    with DaemonLock(tmp_path) as lock:
        (tmp_path / "daemon.lock").write_bytes(b"not json")
        with pytest.raises(AlreadyRunning, match="pid unknown"):
            DaemonLock(tmp_path).acquire()
        assert lock.held
