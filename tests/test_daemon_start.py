"""neverestd's start and stop, on real processes on loopback (issue 26): /healthz is answered before
zeroconf has finished probing, a SIGTERM during that probe ends the process promptly and cleanly, and an
idle daemon does not hold numpy, nor an HTTP client before it calls a peer."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from neverest.control import running

ADDRESS = re.compile(r"listening for peers on http://([0-9.]+):([0-9]+)")
# zeroconf's probe takes about 1.7 s on loopback, and before issue 26 a SIGTERM waited for it and then
# for the goodbyes (2.0 s measured); now the probe is abandoned and the goodbyes bounded to 0.3 s.
PROMPT_STOP_S = 1.5


class Daemon:
    """One neverestd whose standard error is read line by line as it comes (timestamped)."""

    def __init__(self, home: Path, *extra: str) -> None:
        home.mkdir(parents=True, exist_ok=True)  # --home wants the folder to exist (the store is made in it)
        self.lines: list[tuple[float, str]] = []
        self.proc = subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(home), "--listen",
                                      "127.0.0.1:0", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append((time.monotonic(), line))

    def logged(self, text: str) -> bool:
        return any(text in line for _, line in list(self.lines))

    def address(self, timeout_s: float = 60.0) -> tuple[str, int]:
        deadline = time.monotonic() + timeout_s
        while True:
            for _, line in list(self.lines):
                if match := ADDRESS.search(line):
                    return match.group(1), int(match.group(2))
            assert self.proc.poll() is None, "".join(line for _, line in self.lines)
            assert time.monotonic() < deadline
            time.sleep(0.005)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self._reader.join(timeout=5)


def healthz(host: str, port: int) -> int | None:
    conn = http.client.HTTPConnection(host, port, timeout=2.0)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def test_healthz_answers_before_zeroconf_and_sigterm_during_its_probe_stops_promptly(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path / "home", "--mdns-interface", "127.0.0.1")
    try:
        host, port = daemon.address()
        deadline = time.monotonic() + 30
        while healthz(host, port) != 200:
            assert daemon.proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        # Answered while zeroconf is still probing: discovery is not waited for.
        assert not daemon.logged("zeroconf: registered"), "".join(line for _, line in daemon.lines)
        t0 = time.monotonic()
        daemon.proc.send_signal(signal.SIGTERM)
        code = daemon.proc.wait(timeout=30)
        took = time.monotonic() - t0
        daemon._reader.join(timeout=5)
        assert code == 0, "".join(line for _, line in daemon.lines)
        assert took <= PROMPT_STOP_S, f"SIGTERM -> exit took {took:.2f} s"
        assert not (tmp_path / "home" / "control.sock").exists()  # the clean stop removed it
    finally:
        daemon.close()


def test_sigterm_once_ready_stops_promptly_and_cleanly(tmp_path: Path) -> None:
    home = tmp_path / "home"
    daemon = Daemon(home, "--no-mdns")
    try:
        deadline = time.monotonic() + 60
        while not (running(home) and daemon.logged(" ready as ")):
            assert daemon.proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        t0 = time.monotonic()
        daemon.proc.send_signal(signal.SIGTERM)
        code = daemon.proc.wait(timeout=30)
        took = time.monotonic() - t0
        assert code == 0
        assert took <= PROMPT_STOP_S, f"SIGTERM -> exit took {took:.2f} s"
        assert not running(home)
    finally:
        daemon.close()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/<pid>/maps")
def test_an_idle_daemon_does_not_load_numpy(tmp_path: Path) -> None:
    home = tmp_path / "home"
    daemon = Daemon(home, "--no-mdns")
    try:
        deadline = time.monotonic() + 60
        while not (running(home) and daemon.logged(" ready as ")):
            assert daemon.proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(2.0)  # the first ingest (nothing to read in the tests' HOME) and a gossip round
        maps = Path(f"/proc/{daemon.proc.pid}/maps").read_text()
        assert "_multiarray_umath" not in maps, "numpy is resident in an idle daemon"
        assert os.path.exists(home / "memory.db")
    finally:
        daemon.proc.terminate()
        daemon.close()


def test_the_daemon_and_its_services_load_no_http_client_until_an_exchange() -> None:
    """httpx (about 6 MB resident with httpcore, click and pygments) is loaded by the first exchange the
    daemon starts (gossip/service.py ``Gossip.http``), the directory's first fetch or a commons op: an idle
    daemon alone does without it.  The project logs' module is loaded by a forget that names one."""
    code = ("import importlib, sys; import neverest.daemon as d; [importlib.import_module(n) for n in "
            "(*d.LATER_SERVICES, 'neverest.peers.directory', 'neverest.transports.adapters')]; "
            "print(sorted(m for m in ('httpx', 'httpcore', 'neverest.httpclient', 'neverest.relay', "
            "'neverest.transports.commons_client', 'numpy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


# What an idle daemon does without, loaded by the first job, exchange, night or op that needs it (docs/figures.md,
# "resident memory of an idle neverestd"); each was resident in an idle daemon before.
NOT_IDLE = ("argparse", "gettext",  # the command line's parse only (daemon.PARSE_ONLY_MODULES)
            "httpx", "httpcore", "neverest.httpclient", "numpy",  # the first exchange the daemon starts
            "neverest.memory.receive", "neverest.verify_pool", "neverest.memory.scrub",  # the first records applied
            "neverest.memory.service", "neverest.memory.embed",  # the memory worker's first job
            "neverest.memory.inbox", "neverest.memory.events",  # the first drain of an inbox that exists
            "neverest.agents.doors", "neverest.agents.ingest", "neverest.agents.transcripts",  # a wired agent
            "neverest.transports.adapters", "neverest.peers.directory", "neverest.metrics")
# A daemon run in this process by its own main(); a thread waits until it answers on its control socket and
# has settled (its first inbox poll and gossip round), prints what it holds of NOT_IDLE, and stops it.
IDLE_PROBE = """
import json, os, signal, sys, threading, time
from pathlib import Path
from neverest.control import running
from neverest import daemon
home, watched = Path(sys.argv[1]), json.loads(sys.argv[2])
def probe():
    while not running(home):
        time.sleep(0.02)
    time.sleep(1.5)
    print(json.dumps(sorted(m for m in watched if m in sys.modules)), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
threading.Thread(target=probe, daemon=True).start()
sys.exit(daemon.main(["--home", str(home), "--listen", "127.0.0.1:0", "--no-mdns"]))
"""


def test_an_idle_daemon_holds_none_of_the_modules_its_first_work_loads(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run([sys.executable, "-c", IDLE_PROBE, str(home), json.dumps(NOT_IDLE)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [], done.stdout
    assert running(home) is False and (home / "memory.db").exists()


def test_httpx_is_loaded_without_its_command_line() -> None:
    """httpclient keeps httpx's own command line (click, rich, pygments: 2.8 MB where they are installed, as
    beside pytest) out of a process that gossips; httpx's ``main`` says how to install it instead."""
    code = ("import sys; import neverest.httpclient, httpx; "
            "print(sorted(m for m in ('click', 'rich', 'pygments') if m in sys.modules), callable(httpx.main))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[] True", done.stdout
