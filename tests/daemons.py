"""Real ``neverestd`` processes for tests: started on 127.0.0.1 with zeroconf off, stopped whatever happens."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from neverest.control import ask, running


def spawn(home: Path, now: str) -> subprocess.Popen[bytes]:
    """Start a daemon on ``home`` (loopback, any free port, no zeroconf), its clock at ``now``."""
    return subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(home), "--listen", "127.0.0.1:0",
                             "--no-mdns"], stderr=subprocess.DEVNULL, env=dict(os.environ, NEVEREST_NOW=now))


def listening(home: Path, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> str:
    """The URL peers reach the daemon at, once its control socket answers."""
    deadline = time.monotonic() + timeout_s
    while not running(home):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    return "http://" + ask(home, {"op": "status"})["status"]["listen"][0].split("//")[-1]


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Terminate every process, killing those that do not exit within 20 s."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
