"""Neverest and HashiCorp Serf side by side: N real nodes of each on loopback, one new event, who has it when.

Each group runs alone inside its own network namespace made by this script, with only ``lo`` up,
so every byte the group sends crosses that ``lo`` once and ``tx_bytes`` of that ``lo`` counts it
(read from ``/proc/PID/net/dev`` of a process inside the namespace).

- Neverest: N ``neverestd`` with zeroconf off, each given 3 random others as static ``peers``,
  ``gossip_every_s`` = the period, ``fanout`` = 3.  An event is one new lesson: two episodes of a new
  error in two sessions sent to one daemon over its control socket, then a sleep there (the daemon
  learns the lesson, signs it, and starts a round, as it does after every sleep).  A node has the event
  when its store (``memory.db``, read-only) holds a record newer than those it held before.
- Serf: N ``serf agent`` (0.8, ``-profile=lan``: gossip every 200 ms to 3 nodes) joined in one
  cluster, each with its own bind and RPC port on 127.0.0.1.  An event is a user event
  (``serf event``) sent to one agent; an event handler logs its arrival time at each node.  Serf 0.8
  has no setting for the gossip interval (its configuration keys have none; ``-profile`` is ``lan``
  200 ms / 3 nodes, ``wan`` 500 ms / 4 nodes, ``local`` 100 ms / 3 nodes), so it runs at 200 ms for
  both periods and the output says so.  The bytes of the ``serf event`` RPC itself (TCP on the same
  ``lo``) are measured on a lone agent in a namespace of its own and subtracted.

Per group, after a warm-up (every node has one unmeasured event; for Serf, all members alive): the
window right after that event, "tail" (traffic KB/s per node, CPU % of a core per process, descriptors,
TCP sockets by state; Neverest's paced rounds are still slowing down then, so it is the event's tail,
not idle), then ``--events`` events from different nodes, one at a time: time from the origin holding
it to every node holding it, rounds = that time / the period, nodes that miss it by the deadline,
and bytes per node for the event (traffic from the trigger until a tail after the last arrival,
minus the idle rate over the same time).  Medians are reported.  Last, the settled idle window:
``--settle`` s after the last event (Neverest's waits have grown to ``gossip_quiet_every_s`` by then;
Serf gossips only when it has something, probes every second and pushes its full state every 30 s),
``--settled`` s long, during which the benchmark sends nothing and asks no node anything: the same
wait and window for both systems.

    python benchmarks/bench_serf.py [--nodes 10,30] [--periods 0.2,1] [--events 5] [--json]
        [--settle 120] [--settled 60]
        [--py-spy SECONDS [--py-spy-during idle|events]]   (profile one Neverest daemon)

Every namespace and process it makes is removed at the end, whatever happens (also on Ctrl-C).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neverest.control import ask, running

TICKS = os.sysconf("SC_CLK_TCK")
SERF = shutil.which("serf") or "/usr/bin/serf"
PY_SPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
SERF_PERIOD_S = 0.2  # -profile=lan: memberlist's GossipInterval 200 ms, GossipNodes 3
FANOUT = 3
POLL_S = 0.05
LOGS: Path | None = None  # --logs: where each Neverest daemon's log goes (else nowhere)


# -- small parsers (tested in tests/test_bench_serf.py) ----------------------------------------------


def lo_tx_bytes(net_dev: str) -> int:
    """``tx_bytes`` of ``lo`` in the text of ``/proc/net/dev``."""
    for line in net_dev.splitlines():
        name, sep, rest = line.partition(":")
        if sep and name.strip() == "lo":
            return int(rest.split()[8])  # 8 receive columns, then transmit bytes
    raise ValueError("no lo in /proc/net/dev")


def socket_states(ss_output: str) -> dict[str, int]:
    """TCP sockets by state from ``ss -tanH`` (every socket of the namespace is the group's)."""
    states: collections.Counter[str] = collections.Counter()
    for line in ss_output.splitlines():
        parts = line.split()
        if len(parts) >= 5:
            states[parts[0]] += 1
    return dict(sorted(states.items()))


def top_frames(collapsed: str, n: int = 15) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """From py-spy's ``--format raw`` (collapsed stacks ``a;b;c COUNT``): the ``n`` frames with the most
    samples as the innermost frame (self), and with the most samples anywhere in the stack (total), in %."""
    own: collections.Counter[str] = collections.Counter()
    anywhere: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            anywhere[frame] += count
    if samples == 0:
        return [], []

    def pct(counter: collections.Counter[str]) -> list[tuple[str, float]]:
        return [(frame, round(100 * c / samples, 1)) for frame, c in counter.most_common(n)]
    return pct(own), pct(anywhere)


# -- processes and namespaces --------------------------------------------------------------------------


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass
class Group:
    """One namespace and the processes started in it."""

    ns: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def run(self, *argv: str, timeout_s: float = 20.0) -> str:
        return subprocess.run(["ip", "netns", "exec", self.ns, *argv], capture_output=True, text=True,
                              timeout=timeout_s, check=False).stdout

    def spawn(self, argv: list[str], log: Path | None = None, **kwargs: Any) -> subprocess.Popen[bytes]:
        # `ip netns exec` execs the command: the pid is the daemon's own, for /proc.
        with open(log, "ab") if log is not None else contextlib.nullcontext() as err:
            proc = subprocess.Popen(["ip", "netns", "exec", self.ns, *argv], stdout=subprocess.DEVNULL,
                                    stderr=err if err is not None else subprocess.DEVNULL, **kwargs)
        self.procs.append(proc)
        return proc

    def tx_bytes(self) -> int:
        for proc in self.procs:  # any live process of the namespace sees its /proc/net/dev
            with contextlib.suppress(OSError):
                return lo_tx_bytes(Path(f"/proc/{proc.pid}/net/dev").read_text())
        return lo_tx_bytes(self.run("cat", "/proc/net/dev"))

    def sockets(self) -> dict[str, int]:
        return socket_states(self.run("ss", "-tanH"))


@contextlib.contextmanager
def namespace(label: str) -> Iterator[Group]:
    name = f"nvbench-{label}-{secrets.token_hex(3)}"
    _ip("netns", "add", name)
    group = Group(name)
    try:
        _ip("-n", name, "link", "set", "lo", "up")
        yield group
    finally:
        for proc in group.procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 20
        for proc in group.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10, check=False)


def _wait(what: str, done: Callable[[], bool], timeout_s: float, group: Group) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        if any(p.poll() is not None for p in group.procs):
            raise RuntimeError(f"a process exited while waiting for {what}")
        time.sleep(0.1)


# -- one measured group ----------------------------------------------------------------------------------


@dataclass
class Event:
    time_to_all_s: float | None  # None: someone missed it
    missed: int
    bytes_per_node: float  # traffic of the window minus the idle rate × its length
    window_s: float
    bytes_per_node_by_exchange: float | None = None  # minus that many in-sync exchanges (Neverest)


class System:
    """What differs between the two systems: how nodes start, how an event is made and seen."""

    name = ""
    nodes: int
    period_s: float

    group: Group

    def start(self, group: Group, tmp: Path, rng: random.Random) -> None:
        raise NotImplementedError

    def settled(self) -> bool:
        raise NotImplementedError

    def trigger(self, k: int, origin: int) -> None:
        raise NotImplementedError

    def arrivals(self) -> dict[int, float]:  # node -> time.time() it had the last event triggered
        raise NotImplementedError

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass

    def pids(self) -> list[int]:
        return [p.pid for p in self.group.procs]

    def rounds_done(self) -> list[int] | None:
        """Exchanges each node has started so far, when the system says (to find its real period)."""
        return None

    def idle_poll(self) -> None:
        """What polling for arrivals costs, paid in the idle window too so that the baseline bears it."""

    def quiet_rounds(self) -> list[int] | None:
        """Each node's quiet rounds in a row (its pacing), when the system says."""
        return None


class Neverest(System):
    name = "neverest"

    def __init__(self, nodes: int, period_s: float) -> None:
        self.nodes, self.period_s = nodes, period_s
        self.homes: list[Path] = []
        self.project = Path()
        self.base: list[int] = []
        self.seen: dict[int, float] = {}
        self.sleeper: subprocess.Popen[bytes] | None = None
        self.dbs: dict[int, sqlite3.Connection] = {}

    def start(self, group: Group, tmp: Path, rng: random.Random) -> None:
        self.group = group
        ports = [7500 + i for i in range(self.nodes)]  # a fresh namespace: every port is free
        self.project = tmp / "project"
        self.project.mkdir()
        for i, port in enumerate(ports):
            home = tmp / f"n{i}"
            home.mkdir(mode=0o700)
            others = rng.sample([p for p in ports if p != port], min(3, self.nodes - 1))
            peers = ", ".join(f'"http://127.0.0.1:{p}"' for p in others)
            (home / "config.toml").write_text(f"gossip_every_s = {self.period_s}\nfanout = {FANOUT}\nmdns = false\n"
                                              f"peers = [{peers}]\ningest_every_s = 0.0\n")
            group.spawn([sys.executable, "-m", "neverest.daemon", "--home", str(home), "--listen",
                         f"127.0.0.1:{port}", "--no-mdns", "--log-level", "info" if LOGS else "warning"],
                        log=None if LOGS is None else LOGS / f"n{i}.log")
            self.homes.append(home)
        _wait("the daemons' control sockets", lambda: all(running(h) for h in self.homes), 60 + 3 * self.nodes,
              group)
        for home in self.homes:  # any node may be an event's origin; publishing starts a round, so do it now
            ask(home, {"op": "publish", "project": str(self.project), "corrections": False})

    def settled(self) -> bool:
        return True

    def _statuses(self) -> list[dict[str, Any]]:
        # All at once: asked one after another, 30 busy daemons take seconds, and the count drifts off the
        # traffic counter read beside it.
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(self.homes)) as pool:
            return list(pool.map(lambda home: ask(home, {"op": "status"}, timeout_s=30)["status"], self.homes))

    def rounds_done(self) -> list[int] | None:
        return [int(s["exchanges"].get("ok", 0)) + int(s["exchanges"].get("failed", 0)) for s in self._statuses()]

    def quiet_rounds(self) -> list[int] | None:
        return [int(s.get("quiet_rounds", 0)) for s in self._statuses()]

    def _max_record(self, i: int) -> int:
        try:
            if i not in self.dbs:  # one read-only connection per home, kept: a poll is one cheap SELECT
                self.dbs[i] = sqlite3.connect(f"{(self.homes[i] / 'memory.db').as_uri()}?mode=ro", uri=True,
                                              timeout=1.0, check_same_thread=False)
            return int(self.dbs[i].execute("SELECT coalesce(max(id), 0) FROM records").fetchone()[0])
        except sqlite3.OperationalError:  # busy past the timeout: not seen this poll
            return -1

    def idle_poll(self) -> None:
        for i in range(self.nodes):
            self._max_record(i)

    def trigger(self, k: int, origin: int) -> None:
        home = self.homes[origin]
        self.base = [self._max_record(i) for i in range(self.nodes)]
        self.seen = {}
        error = {"kind": "error", "title": f"bench event {k}: pip install -e . fails",
                 "happened": f"fails without --no-build-isolation (case {k})", "cwd": str(self.project)}
        ask(home, {"op": "remember", "events": [error | {"session": f"e{k}a"}, error | {"session": f"e{k}b"}]})
        # The sleep answers only after its round: ask for it from a child so that polling starts now.
        code = ("import sys; from pathlib import Path; from neverest.control import ask; "
                "ask(Path(sys.argv[1]), {'op': 'sleep'})")
        self.sleeper = subprocess.Popen([sys.executable, "-c", code, str(home)], stdout=subprocess.DEVNULL)

    def arrivals(self) -> dict[int, float]:
        now = time.time()
        for i in range(self.nodes):
            if i not in self.seen and self._max_record(i) > self.base[i] >= 0:
                self.seen[i] = now
        return self.seen

    def finish(self) -> None:
        if self.sleeper is not None:
            self.sleeper.wait(timeout=120)
            self.sleeper = None

    def close(self) -> None:
        for db in self.dbs.values():
            db.close()
        self.dbs.clear()


class Serf(System):
    name = "serf"

    def __init__(self, nodes: int) -> None:
        self.nodes, self.period_s = nodes, SERF_PERIOD_S
        self.logs = Path()
        self.event = ""

    def start(self, group: Group, tmp: Path, rng: random.Random) -> None:
        self.group = group
        self.logs = tmp / "arrivals"
        self.logs.mkdir()
        handler = tmp / "handler.sh"
        # The payload comes on standard input; one log file per node, one line per event.
        handler.write_text(f'#!/bin/sh\nnow=$(date +%s.%N)\nread -r payload\necho "$now $payload" '
                           f'>> {self.logs}/"$SERF_SELF_NAME"\n')
        handler.chmod(0o755)
        for i in range(self.nodes):
            argv = [SERF, "agent", f"-node=s{i}", f"-bind=127.0.0.1:{8000 + i}", f"-rpc-addr=127.0.0.1:{9000 + i}",
                    "-profile=lan", "-log-level=err", f"-event-handler=user:bench={handler}"]
            if i:
                argv += ["-retry-join=127.0.0.1:8000", "-retry-interval=1s"]
            group.spawn(argv)

    def settled(self) -> bool:
        out = self.group.run(SERF, "members", "-rpc-addr=127.0.0.1:9000", "-status=alive")
        return len(out.splitlines()) == self.nodes

    def trigger(self, k: int, origin: int) -> None:
        self.event = f"e{k}"
        self.group.run(SERF, "event", f"-rpc-addr=127.0.0.1:{9000 + origin}", "-coalesce=false", "bench", self.event)

    def arrivals(self) -> dict[int, float]:
        seen = {}
        for i in range(self.nodes):
            with contextlib.suppress(OSError):
                for line in (self.logs / f"s{i}").read_text().splitlines():
                    at, _, payload = line.partition(" ")
                    if payload == self.event:
                        seen[i] = float(at)
        return seen


def serf_rpc_bytes() -> float:
    """Bytes one ``serf event`` RPC puts on ``lo`` (handshake and request over TCP), on a lone agent."""
    with namespace("serf-rpc") as group:
        group.spawn([SERF, "agent", "-node=lone", "-bind=127.0.0.1:8000", "-rpc-addr=127.0.0.1:9000",
                     "-log-level=err"])
        _wait("the lone agent", lambda: "lone" in group.run(SERF, "members", "-rpc-addr=127.0.0.1:9000"), 20, group)
        time.sleep(1.0)
        sizes = []
        for k in range(3):
            before = group.tx_bytes()
            group.run(SERF, "event", "-rpc-addr=127.0.0.1:9000", "-coalesce=false", "bench", f"e{k}")
            time.sleep(0.5)
            sizes.append(group.tx_bytes() - before)
        return statistics.median(sizes)


def settled_window(system: System, group: Group, *, settle_s: float, window_s: float) -> dict[str, Any]:
    """Idle at steady state: ``settle_s`` after the last event, ``window_s`` long, nothing sent by the benchmark.

    The control-socket status (Neverest's exchange counts and pacing) is asked before the wait for
    the window's start and after its end, outside the window; inside it the benchmark only reads
    /proc (CPU, descriptors, ``lo``'s counter), which sends nothing and wakes no node."""
    pids = system.pids()
    rounds0, quiet0 = system.rounds_done(), system.quiet_rounds()
    time.sleep(settle_s)
    load = os.getloadavg()
    cpu0, tx0, t0 = [cpu_s(p) for p in pids], group.tx_bytes(), time.monotonic()
    samples = [(t0, tx0)]
    while time.monotonic() - t0 < window_s:
        time.sleep(1.0)
        samples.append((time.monotonic(), group.tx_bytes()))
    cpu1, tx1, t1 = [cpu_s(p) for p in pids], group.tx_bytes(), time.monotonic()
    fds1 = [fds(p) for p in pids]
    rounds1, quiet1 = system.rounds_done(), system.quiet_rounds()
    shares = [(b - a) / (t1 - t0) * 100 for a, b in zip(cpu0, cpu1, strict=True)]
    # the busiest 10 s of the window, per node: whether a push-pull or a round stands out
    peak = max(((xb - xa) / (tb - ta) for (ta, xa), (tb, xb) in zip(samples, samples[10:], strict=False)),
               default=(tx1 - tx0) / (t1 - t0))
    out: dict[str, Any] = {
        "after_last_event_s": settle_s, "window_s": round(t1 - t0, 1), "load": load,
        "kb_s_per_node": round((tx1 - tx0) / (t1 - t0) / system.nodes / 1000, 3),
        "peak_10s_kb_s_per_node": round(peak / system.nodes / 1000, 3),
        "cpu_pct_median": round(statistics.median(shares), 3), "cpu_pct_max": round(max(shares), 3),
        "cpu_pct_mean": round(statistics.mean(shares), 3), "fds_median": statistics.median(fds1),
        "sockets": group.sockets(),
    }
    if rounds0 is not None and rounds1 is not None:
        # from the end of the events to the window's end: exchanges started a node a minute
        out["exchanges_per_node_min_since_events"] = round(
            (sum(rounds1) - sum(rounds0)) / system.nodes / ((settle_s + window_s) / 60), 2)
    if quiet0 is not None and quiet1 is not None:
        out["quiet_rounds_median_before_after"] = [statistics.median(quiet0), statistics.median(quiet1)]
    return out


def measure(system: System, *, warmup_s: float, idle_s: float, events: int, deadline_s: float, seed: int,
            rpc_bytes: float, profile_s: float, profile_out: Path | None, profile_gil: bool = False,
            profile_phase: str = "idle", settle_s: float = 0.0, settled_s: float = 0.0) -> dict[str, Any]:
    rng = random.Random(seed)
    label = f"{system.name[:5]}{system.nodes}"
    # The folder outlives the namespace: its processes are stopped before their homes are removed.
    with tempfile.TemporaryDirectory(prefix="nvserf-", ignore_cleanup_errors=True) as tmp_name, \
            namespace(label) as group:
        started = time.monotonic()
        system.start(group, Path(tmp_name), rng)
        _wait("all members alive", system.settled, 60, group)
        # Warm-up: one unmeasured event reaches everyone (peers have met, every path has run once).
        warm = run_event(system, group, k=0, origin=0, deadline_s=deadline_s, tail_s=0.0, idle_rate=0.0,
                         rpc_bytes=rpc_bytes)
        time.sleep(max(0.0, warmup_s - (time.monotonic() - started)))
        pids = system.pids()
        load = os.getloadavg()
        def profile(pid: int) -> subprocess.Popen[bytes] | None:
            if profile_out is None:
                return None
            return subprocess.Popen([PY_SPY, "record", "--pid", str(pid), "--duration", str(int(profile_s)),
                                     "--rate", "100", "--format", "raw", "--output", str(profile_out),
                                     "--nonblocking", *(["--gil"] if profile_gil else [])],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        profiler = profile(pids[0]) if profile_phase == "idle" else None
        tx_a = group.tx_bytes()
        rounds0 = system.rounds_done()
        tx_b = group.tx_bytes()
        cpu0, fds0, tx0, t0 = [cpu_s(p) for p in pids], [fds(p) for p in pids], group.tx_bytes(), time.monotonic()
        samples = [(t0, tx0)]
        while time.monotonic() - t0 < idle_s:  # traffic every 0.25 s: how noisy the idle baseline is
            if time.monotonic() - samples[-1][0] >= 0.25:
                samples.append((time.monotonic(), group.tx_bytes()))
            system.idle_poll()
            time.sleep(POLL_S)
        cpu1, fds1, tx1, t1 = [cpu_s(p) for p in pids], [fds(p) for p in pids], group.tx_bytes(), time.monotonic()
        tx_c = group.tx_bytes()
        rounds1 = system.rounds_done()
        tx_d = group.tx_bytes()
        sockets = group.sockets()
        if profiler is not None:
            profiler.wait(timeout=profile_s + 60)
        idle_rate = (tx1 - tx0) / (t1 - t0)  # bytes/s, whole group
        # Neverest's exchange rate is CPU-bound and drops while an event is worked on: its baseline is per
        # in-sync exchange (bytes of the window minus that many in-sync exchanges), not per second.
        per_exchange = None
        if rounds0 is not None and rounds1 is not None and sum(rounds1) > sum(rounds0):
            # the traffic counter at the middle of each count (the counts take a while under load)
            per_exchange = ((tx_c + tx_d) / 2 - (tx_a + tx_b) / 2) / (sum(rounds1) - sum(rounds0))
        shares = [(b - a) / (t1 - t0) * 100 for a, b in zip(cpu0, cpu1, strict=True)]
        tail_s = max(2.0, 2 * system.period_s)
        if profile_phase == "events":  # a node that is never an event's origin (those are k * 7 mod N)
            profiler = profile(pids[1])
        measured = [run_event(system, group, k=k, origin=(k * 7) % system.nodes, deadline_s=deadline_s,
                              tail_s=tail_s, idle_rate=idle_rate, rpc_bytes=rpc_bytes, per_exchange=per_exchange)
                    for k in range(1, events + 1)]
        if profiler is not None and profile_phase == "events":
            profiler.wait(timeout=profile_s + 60)
        fds_end = [fds(p) for p in pids]
        sockets_end = group.sockets()
        settled = settled_window(system, group, settle_s=settle_s, window_s=settled_s) if settled_s > 0 else None
        system.close()
    reached = [e.time_to_all_s for e in measured if e.time_to_all_s is not None]
    window_s = statistics.median(e.window_s for e in measured)
    noise = idle_noise(samples, idle_rate, window_s)
    effective = None
    if rounds0 is not None and rounds1 is not None:
        per_daemon = [(b - a) / FANOUT for a, b in zip(rounds0, rounds1, strict=True)]
        done = statistics.median(per_daemon)
        effective = round((t1 - t0) / done, 2) if done > 0 else None
    time_to_all = statistics.median(reached) if reached else None
    return {
        "system": system.name, "nodes": system.nodes, "period_s": system.period_s, "load_at_idle": load,
        "warmup_event_s": warm.time_to_all_s, "warmup_missed": warm.missed, "idle_window_s": round(t1 - t0, 1),
        "idle_kb_s_per_node": round(idle_rate / system.nodes / 1000, 3),
        "idle_cpu_pct_median": round(statistics.median(shares), 2), "idle_cpu_pct_max": round(max(shares), 2),
        "fds_median": statistics.median(fds0), "fds_idle_end_median": statistics.median(fds1),
        "fds_end_median": statistics.median(fds_end), "fds_end_max": max(fds_end),
        "sockets_idle": sockets, "sockets_end": sockets_end,
        "events": [e.__dict__ for e in measured],
        "time_to_all_s": None if time_to_all is None else round(time_to_all, 3),
        "rounds": None if time_to_all is None else round(time_to_all / system.period_s, 2),
        "missed_total": sum(e.missed for e in measured),
        "bytes_per_node_event_time_baseline": round(statistics.median(e.bytes_per_node for e in measured)),
        "bytes_per_node_event": round(statistics.median(
            e.bytes_per_node if e.bytes_per_node_by_exchange is None else e.bytes_per_node_by_exchange
            for e in measured)),
        "baseline": "per in-sync exchange" if per_exchange is not None else "per second of idle",
        "idle_bytes_per_exchange": None if per_exchange is None else round(per_exchange),
        "event_window_s": round(window_s, 2),
        "idle_noise_bytes_per_node": None if noise is None else round(noise / system.nodes),
        "effective_period_s": effective,
        "rounds_at_effective_period": None if time_to_all is None or effective is None
        else round(time_to_all / effective, 2),
        "settled": settled,
    }


def idle_noise(samples: list[tuple[float, int]], rate: float, window_s: float) -> float | None:
    """Standard deviation of (bytes - rate × time) over idle windows as long as an event's: how much of an
    event's bytes could be the idle baseline's own wobble.  None when the idle window is too short."""
    extras = []
    for i, (ta, xa) in enumerate(samples):
        for tb, xb in samples[i + 1:]:
            if tb - ta >= window_s:
                extras.append((xb - xa) - rate * (tb - ta))
                break
    return statistics.pstdev(extras) if len(extras) >= 2 else None


def run_event(system: System, group: Group, *, k: int, origin: int, deadline_s: float, tail_s: float,
              idle_rate: float, rpc_bytes: float, per_exchange: float | None = None) -> Event:
    tx_a = group.tx_bytes()
    ex0 = system.rounds_done() if per_exchange is not None else None
    tx0, t0 = group.tx_bytes(), time.monotonic()
    system.trigger(k, origin)
    seen: dict[int, float] = {}
    while time.monotonic() - t0 < deadline_s:
        seen = system.arrivals()
        if len(seen) == system.nodes:
            break
        time.sleep(POLL_S)
    time.sleep(tail_s)  # what the event still causes after the last arrival (retransmits, answers in flight)
    tx1, t1 = group.tx_bytes(), time.monotonic()
    ex1 = system.rounds_done() if per_exchange is not None else None
    tx_d = group.tx_bytes()
    system.finish()
    missed = system.nodes - len(seen)
    # From the origin holding it to the last node holding it (a node's time is when it was seen).
    first = seen.get(origin)
    spread = (max(seen.values()) - first) if not missed and first is not None else None
    extra = (tx1 - tx0) - idle_rate * (t1 - t0) - (rpc_bytes if system.name == "serf" else 0.0)
    by_exchange = None
    if per_exchange is not None and ex0 is not None and ex1 is not None:
        by_exchange = ((tx1 + tx_d) / 2 - (tx_a + tx0) / 2 - per_exchange * (sum(ex1) - sum(ex0))) / system.nodes
    return Event(time_to_all_s=spread, missed=missed, bytes_per_node=extra / system.nodes, window_s=t1 - t0,
                 bytes_per_node_by_exchange=by_exchange)


# -- the run -------------------------------------------------------------------------------------------------


def _stop_on_term(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # the finally blocks stop the processes and delete the namespaces


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", default="10,30")
    parser.add_argument("--periods", default="0.2,1")
    parser.add_argument("--events", type=int, default=5)
    parser.add_argument("--idle", type=float, default=10.0,
                        help="the window right after the warm-up event (the event's tail), seconds")
    parser.add_argument("--settle", type=float, default=120.0,
                        help="settled idle: the wait after the last event before its window, seconds")
    parser.add_argument("--settled", type=float, default=60.0,
                        help="settled idle: its window, seconds (0: none)")
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--deadline", type=float, default=20.0, help="an event not everywhere by then: missed")
    parser.add_argument("--systems", default="neverest,serf")
    parser.add_argument("--py-spy", type=float, default=0.0, dest="py_spy",
                        help="profile one Neverest daemon for this many seconds in the first idle window")
    parser.add_argument("--py-spy-during", choices=("idle", "events"), default="idle", dest="py_spy_during",
                        help="profile in the window after the warm-up event (idle), or from the first measured "
                             "event on, one daemon that is no event's origin (events)")
    parser.add_argument("--py-spy-gil", action="store_true", dest="py_spy_gil",
                        help="keep only samples holding the GIL (Python running, not waiting)")
    parser.add_argument("--logs", type=Path, help="keep each Neverest daemon's log (level info) in this folder")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root (CAP_NET_ADMIN) for `ip netns add`", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop_on_term)
    global LOGS
    LOGS = args.logs
    if LOGS is not None:
        LOGS.mkdir(parents=True, exist_ok=True)
    nodes = [int(n) for n in args.nodes.split(",")]
    periods = [float(p) for p in args.periods.split(",")]
    systems = args.systems.split(",")
    common: dict[str, Any] = {"warmup_s": args.warmup, "idle_s": args.idle, "events": args.events,
                              "deadline_s": args.deadline, "seed": args.seed, "settle_s": args.settle,
                              "settled_s": args.settled}
    started = time.monotonic()
    rpc = serf_rpc_bytes() if "serf" in systems else 0.0
    rows: list[dict[str, Any]] = []
    profile: dict[str, Any] | None = None

    def row(system: System, **kwargs: Any) -> None:
        try:
            rows.append(measure(system, **kwargs, **common))
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:  # the other rows still count
            rows.append({"system": system.name, "nodes": system.nodes, "period_s": system.period_s,
                         "error": f"{type(exc).__name__}: {exc}"})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # progress, and what survives a crash

    for n in nodes:
        if "serf" in systems:  # one run per N: its period cannot be set
            row(Serf(n), rpc_bytes=rpc, profile_s=0, profile_out=None)
        for period in periods:
            if "neverest" not in systems:
                continue
            out = None
            if args.py_spy and profile is None:
                out = Path(tempfile.mkstemp(prefix="nvserf-pyspy-", suffix=".txt")[1])
            row(Neverest(n, period), rpc_bytes=0.0, profile_s=args.py_spy, profile_out=out,
                profile_gil=args.py_spy_gil, profile_phase=args.py_spy_during)
            if out is not None:
                own, total = top_frames(out.read_text() if out.exists() else "")
                profile = {"nodes": n, "period_s": period, "seconds": args.py_spy, "raw": str(out),
                           "during": args.py_spy_during,
                           "gil": args.py_spy_gil, "self": own, "total": total}
    result: dict[str, Any] = {
        "load_end": os.getloadavg(), "wall_s": round(time.monotonic() - started), "serf_rpc_bytes": rpc,
        "serf_note": "serf 0.8 cannot set its gossip interval: it runs -profile=lan (200 ms, 3 nodes) "
                     "for every period", "rows": rows, "profile": profile}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"Neverest vs Serf on loopback, fanout 3, {args.events} events per row, medians "
          f"(load at end {result['load_end'][0]:.2f}, {result['wall_s']} s)")
    print(f"{'N':>3} {'period':>7} {'system':9} {'to all s':>8} {'rounds':>6} {'missed':>6} {'B/node/ev':>9} "
          f"{'±idle':>6} {'tail KB/s/n':>11} {'tail CPU%':>9} {'idle KB/s/n':>11} {'idle CPU%':>9} {'fds':>5} "
          f"{'real period':>11} {'load':>5}")
    for r in rows:
        if "error" in r:
            print(f"{r['nodes']:>3} {r['period_s']:>6g}s {r['system']:9} failed: {r['error']}")
            continue
        shown = f"{r['period_s']:g}s" + ("*" if r["system"] == "serf" else "")
        tta = "-" if r["time_to_all_s"] is None else f"{r['time_to_all_s']:.2f}"
        rounds = "-" if r["rounds"] is None else f"{r['rounds']:.1f}"
        noise = "-" if r["idle_noise_bytes_per_node"] is None else str(r["idle_noise_bytes_per_node"])
        real = "-" if r["effective_period_s"] is None else f"{r['effective_period_s']:g}s"
        settled = r.get("settled")
        settled_kb = "-" if not settled else f"{settled['kb_s_per_node']:.3f}"
        settled_cpu = "-" if not settled else f"{settled['cpu_pct_median']:.3f}"
        print(f"{r['nodes']:>3} {shown:>7} {r['system']:9} {tta:>8} {rounds:>6} {r['missed_total']:>6} "
              f"{r['bytes_per_node_event']:>9} {noise:>6} {r['idle_kb_s_per_node']:>11.2f} "
              f"{r['idle_cpu_pct_median']:>9.2f} {settled_kb:>11} {settled_cpu:>9} {r['fds_end_median']:>5g} "
              f"{real:>11} {r['load_at_idle'][0]:>5.2f}")
    print(f"tail: over {args.idle:g} s right after the warm-up event (Neverest's rounds still slowing down); "
          f"idle: settled, over {args.settled:g} s starting {args.settle:g} s after the last event, nothing sent "
          "by the benchmark (the same for both systems)")
    if "serf" in systems:
        print(f"* {result['serf_note']}; serf's own `serf event` RPC ({rpc:.0f} B) is subtracted")
    for r in rows:
        if "error" in r:
            continue
        print(f"  {r['system']} N={r['nodes']} {r['period_s']:g}s: sockets idle {r['sockets_idle']}, "
              f"end {r['sockets_end']}; events {[round(e['time_to_all_s'] or -1, 2) for e in r['events']]}; "
              f"bytes/node/event against {r['baseline']}; against idle per second "
              f"{r['bytes_per_node_event_time_baseline']}; idle bytes per exchange {r['idle_bytes_per_exchange']}")
    for r in rows:
        if "error" not in r and r.get("warmup_missed"):
            # e.g. a daemon whose configured peers were not listening yet during its first 3 rounds backs them
            # off for 5 minutes (peers/table.py), and if no one lists it, nobody reaches it either
            print(f"  !! {r['system']} N={r['nodes']}: {r['warmup_missed']} node(s) missed the warm-up event: "
                  "the row's misses are start-up isolation, not spreading")
    for r in rows:
        if "error" not in r and r.get("settled"):
            print(f"  settled {r['system']} N={r['nodes']} {r['period_s']:g}s: {json.dumps(r['settled'])}")
    if profile:
        print(f"py-spy, one daemon, N={profile['nodes']} {profile['period_s']:g}s, {profile['seconds']:g} s "
              f"{profile['during']} ({profile['raw']}): top by self / total")
        for (f1, p1), (f2, p2) in zip(profile["self"][:10], profile["total"][:10], strict=False):
            print(f"  {p1:5.1f} % {f1[:60]:60s} | {p2:5.1f} % {f2[:60]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
