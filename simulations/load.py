"""``python -m simulations load``: a network where everyone publishes, for a simulated week.

Every agent is a memory that has already published (one history lesson each, held by
every memory: digests of N origins from the start) and, during the week, publishes more
at its **night**: each agent has a night hour (uniform over the day: agents live in every
time zone) and on each of the 7 nights publishes a lesson with probability ``rate / 7``
(``rate``: lessons per agent per week), signed then (``records.sign_lesson``, real
Ed25519 records of about 450 bytes), and then starts one gossip round at once, as the
daemon does after its sleep.  Gossip runs in **rounds** of one period: in each, every
agent starts an exchange with each of ``fanout`` peers drawn uniformly from the others,
at a uniformly random moment (``engine.Schedule``, its own seeded stream).

**Every exchange is a real one**: the ``Initiator`` and ``Responder`` of
``neverest.gossip.core``, signed msgpack messages, over the agents' ``OverlayView``s
(overlay.py: a ``StoreView`` that shares what all memories hold, so that 10^4 memories of
10^4 origins fit in memory; it does not verify signatures, as ``loopback.MemoryView`` does
not).  An exchange runs to its end at its moment (``core.drive``): latency is not
modelled, since a period of hours dwarfs a few round trips of milliseconds (engine.py
models it, for the dissemination experiments); a cut exchange (``more``) is followed at
once by another, as ``gossip/service.py`` does.

Then the same run **with today's whole digests** (revision 1: ``Settings(reconcile=False)``)
on the same contacts and publications, for all its rounds or the first ``baseline_rounds``
(at 10^4 origins every exchange that differs carries two digests of 340 KB), and the
**ideal push-pull** on the same contacts (``IdealReplay``: at each contact, both sides end
up holding the union of what they held), for every lesson at once.

Figures: for each lesson, the periods from its signing until the last agent holds it
(median, p95, max), against the ideal's for the same lesson; bytes of all messages per
agent per round; the busiest agent's bytes (sent and received); round trips per exchange.
And a **probe**: one new lesson in a network otherwise in sync (as the dissemination
experiment, here with digests of N origins), with the bytes per agent per round while it
spreads and the bytes of the exchanges that carry it, against the record's own size.

CPU is what limits this experiment: an exchange costs about 0.5 ms of CPU in sync and 0.3
to 1 ms more per record it reconciles (docs/simulations.md, "Load"), and a week in which everyone
publishes once makes N² deliveries.  ``period_s`` and ``rate`` are the knobs.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing
import random
import resource
import statistics
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neverest.clock import iso
from neverest.gossip.core import Initiator, Responder, Settings, drive
from neverest.gossip.peer_auth import ReplayCache
from neverest.gossip.service import MAX_CONTINUATIONS
from neverest.identity import Identity
from neverest.records import sign_lesson
from simulations import ideal, report
from simulations.engine import Schedule, at, stream
from simulations.overlay import Library, OverlayView

DAY_S = 86_400.0
WEEK_DAYS = 7
NIGHT_S = 4 * 3600.0  # a sleep starts within 4 hours of the agent's night hour


@dataclass
class Options:
    agents: int
    rate: float = 1.0  # lessons per agent per week
    days: int = WEEK_DAYS
    period_s: float = 4 * 3600.0  # the modelled gossip period (the daemon's default is 900 s: see the docstring)
    fanout: int = 1
    seed: int = 1
    baseline_rounds: int | None = None  # rounds of the revision-1 run (None: as many as revision 2's; 0: none)
    probe_baseline_rounds: int | None = None  # the same for the probe
    drain_rounds: int = 100  # rounds after the week for the last lessons to reach everyone
    out: Path | None = None
    quiet: bool = False
    # Processes for the run's independent parts (the week with ranges, the probes, the week with
    # whole digests): each part draws from its own seeded streams, so the result is the same
    # with 1 as with 2 (tests/test_sim_load.py checks it); 2 uses both cores of this machine.
    workers: int = 2


# -- the world ---------------------------------------------------------------------------


@dataclass
class World:
    """What both runs share: the agents' keys, the records, the publications and the contacts."""

    identities: list[Identity]
    library: Library
    publications: list[tuple[float, int, bytes]]  # (time, agent, record), by time
    sleeps: list[tuple[float, int, int]]  # the round after each sleep: (time, agent, peer)
    schedule: Schedule


def text_of(lesson: int) -> str:
    return f"pytest finds no tests when the package uses a src layout and is not installed (case {lesson})"


def make_world(n: int, opts: Options, *, name: str = "week", rate: float | None = None) -> World:
    seed = opts.seed
    identities = [Identity.from_seed(hashlib.sha256(f"neverest-sim/{seed}/{i}".encode()).digest()) for i in range(n)]
    library = Library()
    for ident in identities:  # the history: one lesson each, before the run, held by everyone
        history = sign_lesson(ident.signing_key, kind="error", text=text_of(-1), seen=3, strength=0.8,
                              updated=iso(at(-DAY_S)), seq=1)
        library.settle(history.raw)
    chance = stream(seed, f"{name}/publish")
    night = [chance.random() * DAY_S for _ in range(n)]
    p = (opts.rate if rate is None else rate) / WEEK_DAYS
    planned: list[tuple[float, int]] = []
    for day in range(opts.days):
        for i in range(n):
            if chance.random() < p:
                planned.append((day * DAY_S + (night[i] + chance.random() * NIGHT_S) % DAY_S, i))
    planned.sort()
    seqs = [1] * n
    publications: list[tuple[float, int, bytes]] = []
    sleeps: list[tuple[float, int, int]] = []
    schedule = Schedule(n, opts.fanout, opts.period_s, stream(seed, f"{name}/schedule"))
    for t, i in planned:
        seqs[i] += 1
        record = sign_lesson(identities[i].signing_key, kind="error", text=text_of(len(publications)), seen=3,
                             strength=0.8, updated=iso(at(t)), seq=seqs[i])
        library.add(record.raw)
        publications.append((t, i, record.raw))
        sleeps += [(t, i, j) for j in schedule.peers(i)]
    return World(identities, library, publications, sleeps, schedule)


def events(world: World, r: int) -> list[tuple[float, int, int, int]]:
    """Round r's events by time: (t, 0, agent, publication) then (t, 1, i, j) for each exchange."""
    lo, hi = r * world.schedule.period_s, (r + 1) * world.schedule.period_s
    out = [(t, 0, i, k) for k, (t, i, _) in enumerate(world.publications) if lo <= t < hi]
    out += [(t, 1, i, j) for t, i, j in world.sleeps if lo <= t < hi]
    out += [(t, 1, i, j) for t, i, j in world.schedule.contacts(r)]
    out.sort()
    return out


# -- the ideal push-pull, for every lesson at once ----------------------------------------


class IdealReplay:
    """Ideal push-pull over a world's contacts: each agent's lessons as the bits of an int."""

    def __init__(self, world: World) -> None:
        self.n = len(world.identities)
        self.world = world
        self.held = [0] * self.n
        self.count = [0] * len(world.publications)
        self.done: dict[int, float] = {}  # lesson → time the last agent got it

    def round(self, r: int) -> None:
        for t, kind, i, k in events(self.world, r):
            if kind == 0:
                self.held[i] |= 1 << k
                self._got(1 << k, t)
                continue
            a, b = self.held[i], self.held[k]
            both = a | b
            if both != a or both != b:
                self.held[i] = self.held[k] = both
                self._got(both ^ a, t)
                self._got(both ^ b, t)

    def _got(self, bits: int, t: float) -> None:
        while bits:
            low = bits & -bits
            k = low.bit_length() - 1
            bits ^= low
            self.count[k] += 1
            if self.count[k] == self.n:
                self.done[k] = t


# -- the real run ------------------------------------------------------------------------


@dataclass
class Tally:
    exchanges: int = 0  # continuations included
    in_sync: int = 0
    round_trips: int = 0
    round_trips_max: int = 0
    bytes: int = 0
    records: int = 0  # records carried (both directions)
    errors: Counter[str] = field(default_factory=Counter)
    per_round: list[int] = field(default_factory=list)  # bytes of each round
    busiest_round: int = 0  # the most bytes one agent sent and received in one round
    carrying: int = 0  # exchanges that carried records
    carrying_bytes: int = 0
    in_sync_bytes: int = 0


class Network:
    """N agents' views and responders over a world's library, with one revision of the exchange."""

    def __init__(self, world: World, settings: Settings, rng: random.Random) -> None:
        self.world, self.settings, self.rng = world, settings, rng
        self.n = len(world.identities)
        self.views = [OverlayView(world.library, i) for i in range(self.n)]
        self.responders = [Responder(v, ident.signing_key, replay=ReplayCache(skew_s=settings.skew_s),
                                     settings=settings) for v, ident in zip(self.views, world.identities, strict=True)]
        self.origins = [ident.origin for ident in world.identities]
        self.count = [0] * len(world.publications)
        self.done: dict[int, float] = {}
        self.agent_bytes = [0] * self.n
        self.tally = Tally()
        self.now = 0.0
        world.library.on_accept = self._accepted

    def _accepted(self, agent: int, lesson: int) -> None:
        self.count[lesson] += 1
        if self.count[lesson] == self.n:
            self.done[lesson] = self.now

    def round(self, r: int) -> None:
        self.world.library.on_accept = self._accepted
        before, round_bytes = self.tally.bytes, [0] * self.n
        for t, kind, i, k in events(self.world, r):
            self.now = t
            if kind == 0:
                self.views[i].hold(self.world.publications[k][2])
            else:
                self.exchange(i, k, t, round_bytes)
        self.tally.per_round.append(self.tally.bytes - before)
        self.tally.busiest_round = max(self.tally.busiest_round, max(round_bytes))

    def exchange(self, i: int, j: int, t: float, round_bytes: list[int]) -> None:
        now, tally, responder = at(t), self.tally, self.responders[j]
        for _ in range(MAX_CONTINUATIONS):
            initiator = Initiator(self.views[i], self.world.identities[i].signing_key, self.origins[j], now=now,
                                  rng=self.rng, settings=self.settings)
            result = drive(initiator, lambda request: responder.respond(request, now=now, rng=self.rng).data)
            size = result.bytes_sent + result.bytes_received
            tally.exchanges += 1
            tally.in_sync += result.in_sync
            tally.round_trips += result.round_trips
            tally.round_trips_max = max(tally.round_trips_max, result.round_trips)
            tally.bytes += size
            carried = result.records_sent + result.records_received
            tally.records += carried
            tally.carrying += carried > 0
            tally.carrying_bytes += size if carried else 0
            tally.in_sync_bytes += size if result.in_sync else 0
            for a in (i, j):
                self.agent_bytes[a] += size
                round_bytes[a] += size
            if result.error is not None:
                tally.errors[f"{result.error.who} {result.error.code}"] += 1
                return
            if not result.more:
                return


def run_rounds(net: Network, rounds: int, *, until_done: bool, bar: Any) -> int:
    """Run up to ``rounds`` rounds (stopping early once every lesson reached everyone, if asked)."""
    total = len(net.world.publications)
    last = net.world.publications[-1][0] if total else -1.0
    r = 0
    while r < rounds:
        if until_done and len(net.done) == total and r * net.world.schedule.period_s > last:
            break
        net.round(r)
        r += 1
        bar.update(1)
        bar.set_postfix(reached=f"{len(net.done)}/{total}")
    return r


def spread(done: dict[int, float], world: World, period_s: float) -> list[float | None]:
    """Periods from each lesson's signing until the last agent held it (None: not within the run)."""
    return [(done[k] - t) / period_s if k in done else None for k, (t, _, _) in enumerate(world.publications)]


def stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "p95": None, "max": None, "mean": None}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return {"median": statistics.median(ordered), "p95": p95, "max": ordered[-1], "mean": statistics.fmean(ordered)}


def figures(net: Network, rounds: int, cpu_s: float, wall_s: float) -> dict[str, Any]:
    tally, n = net.tally, net.n
    reached = spread(net.done, net.world, net.world.schedule.period_s)
    mean_agent = statistics.fmean(net.agent_bytes)
    return {
        "rounds_run": rounds,
        "lessons_reached_all": sum(r is not None for r in reached),
        "periods_to_all": stats([r for r in reached if r is not None]),
        "periods_to_all_each": reached,
        "bytes": tally.bytes,
        "bytes_per_agent_round": tally.bytes / (n * rounds) if rounds else 0.0,
        "busiest_agent_bytes": max(net.agent_bytes),
        "busiest_agent_bytes_per_round": max(net.agent_bytes) / rounds if rounds else 0.0,
        "mean_agent_bytes": mean_agent,
        "busiest_over_mean": max(net.agent_bytes) / mean_agent if mean_agent else None,
        "busiest_agent_one_round": tally.busiest_round,
        "exchanges": tally.exchanges,
        "in_sync_fraction": tally.in_sync / tally.exchanges if tally.exchanges else 0.0,
        "round_trips_per_exchange": tally.round_trips / tally.exchanges if tally.exchanges else 0.0,
        "round_trips_max": tally.round_trips_max,
        "records_carried": tally.records,
        "errors": dict(tally.errors),
        "bytes_per_round": tally.per_round,
        "cpu_s": cpu_s,
        "wall_s": wall_s,
        "cpu_ms_per_exchange": 1000 * cpu_s / tally.exchanges if tally.exchanges else None,
    }


def simulate(world: World, settings: Settings, rounds: int, *, seed: int, name: str, until_done: bool,
             quiet: bool) -> tuple[Network, dict[str, Any]]:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    net = Network(world, settings, stream(seed, f"{name}/protocol"))
    with report.progress(rounds, f"load {name} N={net.n}", quiet=quiet) as bar:
        ran = run_rounds(net, rounds, until_done=until_done, bar=bar)
    return net, figures(net, ran, time.process_time() - cpu0, time.perf_counter() - wall0)


def ideal_figures(world: World, rounds: int) -> dict[str, Any]:
    replay = IdealReplay(world)
    for r in range(rounds):
        replay.round(r)
    reached = spread(replay.done, world, world.schedule.period_s)
    return {"rounds_run": rounds, "lessons_reached_all": sum(r is not None for r in reached),
            "periods_to_all": stats([r for r in reached if r is not None]), "periods_to_all_each": reached}


def compare(real: dict[str, Any], best: dict[str, Any]) -> dict[str, Any]:
    """Per lesson reached by both: real periods over ideal periods."""
    pairs = [(a, b) for a, b in zip(real["periods_to_all_each"], best["periods_to_all_each"], strict=True)
             if a is not None and b is not None and b > 0]
    ratios = [a / b for a, b in pairs]
    return {"lessons": len(pairs), "ratio": stats(ratios),
            "ratio_of_medians": (statistics.median(a for a, _ in pairs) / statistics.median(b for _, b in pairs)
                                 if pairs else None)}


# -- the probe: one lesson in a network in sync -------------------------------------------


def probe(opts: Options, settings: Settings, name: str, max_rounds: int) -> dict[str, Any]:
    """One agent publishes one lesson at time 0; rounds until everyone holds it (at most max_rounds)."""
    world = make_world(opts.agents, opts, name="probe", rate=0.0)
    n = opts.agents
    first = stream(opts.seed, "probe/first").randrange(n)
    ident = world.identities[first]
    record = sign_lesson(ident.signing_key, kind="error", text=text_of(0), seen=3, strength=0.8,
                         updated=iso(at(0)), seq=2)
    world.library.add(record.raw)
    world.publications.append((0.0, first, record.raw))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    net = Network(world, settings, stream(opts.seed, f"probe/{name}/protocol"))
    curve: list[int] = []
    with report.progress(max_rounds, f"probe {name} N={n}", quiet=opts.quiet) as bar:
        while net.count[0] < n and len(curve) < max_rounds:
            net.round(len(curve))
            curve.append(net.count[0])
            bar.update(1)
    rounds, tally = len(curve), net.tally
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    ideal_curve = ideal.same_contacts(world.schedule, first, max_rounds=4 * rounds + 10)
    carrying = tally.carrying_bytes / tally.carrying if tally.carrying else None
    return {
        "rounds": rounds if net.count[0] == n else None,
        "rounds_run": rounds,
        "holding": net.count[0],
        "ideal_rounds": len(ideal_curve) if ideal_curve[-1] == n else None,
        "ideal_holding_after_rounds_run": ideal_curve[rounds - 1] if 0 < rounds <= len(ideal_curve) else None,
        "curve": curve,
        "ideal_curve": ideal_curve,
        "record_bytes": len(record.raw),
        "bytes_per_agent_round": tally.bytes / (n * rounds) if rounds else 0.0,
        "bytes_per_agent_round_over_record": (tally.bytes / (n * rounds) - len(record.raw)) if rounds else None,
        "carrying_exchanges": tally.carrying,
        "carrying_exchange_bytes": carrying,
        "carrying_exchange_over_record": None if carrying is None else carrying - len(record.raw),
        "in_sync_exchange_bytes": tally.in_sync_bytes / tally.in_sync if tally.in_sync else None,
        "in_sync_fraction": tally.in_sync / tally.exchanges if tally.exchanges else 0.0,
        "exchanges": tally.exchanges,
        "round_trips_per_exchange": tally.round_trips / tally.exchanges if tally.exchanges else 0.0,
        "round_trips_max": tally.round_trips_max,
        "deliveries": tally.records,
        "busiest_agent_bytes_per_round": max(net.agent_bytes) / rounds if rounds else 0.0,
        "errors": dict(tally.errors),
        "cpu_s": cpu,
        "wall_s": wall,
    }


# -- the experiment ----------------------------------------------------------------------


def week_rounds(opts: Options) -> int:
    return math.ceil(opts.days * DAY_S / opts.period_s)


# The world of the run being forked from: worker processes are forked after it is made, so
# they inherit it (and the interpreter's hash seed) instead of rebuilding and pickling it.
_WORLD: World | None = None


def _week(settings: Settings, rounds: int, seed: int, name: str, until_done: bool,
          quiet: bool) -> tuple[dict[str, Any], int]:
    assert _WORLD is not None
    net, part = simulate(_WORLD, settings, rounds, seed=seed, name=name, until_done=until_done, quiet=quiet)
    return part, max(v.changes for v in net.views)


class _Here:
    """The interface of a process pool's futures, for the parts run in this process (workers = 1)."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self._value = fn(*args)

    def result(self) -> Any:
        return self._value


def run(opts: Options) -> dict[str, Any]:
    global _WORLD
    if opts.agents < 2:
        raise ValueError("a network needs at least 2 agents")
    cpu0, wall0 = time.process_time(), time.perf_counter()
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    world = _WORLD = make_world(opts.agents, opts)
    setup_s = time.perf_counter() - wall0
    rounds = week_rounds(opts) + opts.drain_rounds
    pool = (ProcessPoolExecutor(opts.workers, mp_context=multiprocessing.get_context("fork"))
            if opts.workers > 1 else None)

    def submit(fn: Any, *args: Any) -> Any:
        return pool.submit(fn, *args) if pool is not None else _Here(fn, *args)

    try:
        week = submit(_week, Settings(), rounds, opts.seed, "reconcile", True, opts.quiet)
        # The baseline's rounds are known beforehand when given: it need not wait for the week.
        later = opts.baseline_rounds is None
        early = None if later or not opts.baseline_rounds else submit(
            _week, Settings(reconcile=False), opts.baseline_rounds, opts.seed, "digests", False, opts.quiet)
        probe_rounds = 200
        pb = opts.probe_baseline_rounds
        probes = [submit(probe, opts, Settings(), "reconcile", probe_rounds),
                  None if pb == 0 else submit(probe, opts, Settings(reconcile=False), "digests",
                                              probe_rounds if pb is None else pb)]
        reconcile, changes_max = week.result()
        ran = reconcile["rounds_run"]
        baseline_rounds = ran if opts.baseline_rounds is None else min(opts.baseline_rounds, ran)
        if early is not None and baseline_rounds < opts.baseline_rounds:  # asked for more than the week ran
            early = None
        if early is None and baseline_rounds:
            early = submit(_week, Settings(reconcile=False), baseline_rounds, opts.seed, "digests", False,
                           opts.quiet)
        best = ideal_figures(world, ran)
        digests: dict[str, Any] | None = None
        if early is not None:
            digests = early.result()[0]
            # Revision 2 over the same rounds, for bytes measured on the same span.
            span = reconcile["bytes_per_round"][:baseline_rounds]
            digests["reconcile_bytes_per_agent_round_same_rounds"] = sum(span) / (opts.agents * baseline_rounds)
            digests["ideal"] = ideal_figures(world, baseline_rounds)
            digests["vs_ideal"] = compare(digests, digests["ideal"])
        probe_reconcile = probes[0].result()
        probe_digests = None if probes[1] is None else probes[1].result()
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        _WORLD = None
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    sizes = [len(raw) for _, _, raw in world.publications]
    result: dict[str, Any] = {
        "experiment": "load",
        "agents": opts.agents,
        "seed": opts.seed,
        "rate_per_agent_week": opts.rate,
        "days": opts.days,
        "period_s": opts.period_s,
        "fanout": opts.fanout,
        "lessons": len(world.publications),
        "record_bytes_mean": statistics.fmean(sizes) if sizes else None,
        "week_rounds": week_rounds(opts),
        "reconcile": reconcile,
        "ideal": best,
        "vs_ideal": compare(reconcile, best),
        "digests": digests,
        "probe": {"reconcile": probe_reconcile, "digests": probe_digests},
        "rss_max_mb": max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, children.ru_maxrss) / 1024,
        "overlay_changes_max": changes_max,
        "setup_s": setup_s,
        "workers": opts.workers,
        # This process's CPU and its workers' (all of them have ended here).
        "cpu_s": (time.process_time() - cpu0 + children.ru_utime + children.ru_stime
                  - children0.ru_utime - children0.ru_stime),
        "wall_s": time.perf_counter() - wall0,
    }
    if opts.out is not None:
        stem = f"load-n{opts.agents}-s{opts.seed}"
        result["plots"] = [str(plot_spread(result, opts.out / f"{stem}-spread.png")),
                           str(plot_bytes(result, opts.out / f"{stem}-bytes.png"))]
    return result


# -- what it shows -----------------------------------------------------------------------


def plot_spread(result: dict[str, Any], path: Path) -> Path:
    def draw(ax: Any) -> None:
        for values, label, style in (
                (result["reconcile"]["periods_to_all_each"], "Neverest gossip, revision 2 (real code)", "-"),
                (result["ideal"]["periods_to_all_each"], "ideal push-pull, same contacts", "--")):
            xs = sorted(v for v in values if v is not None)
            if xs:
                ax.plot(xs, [(k + 1) / len(xs) for k in range(len(xs))], style, label=label)
        ax.set_xlabel(f"gossip periods ({result['period_s'] / 3600:g} h, fanout {result['fanout']}) "
                      "from signing to the last agent")
        ax.set_ylabel("fraction of the week's lessons")
        ax.set_title(f"Every lesson of a week reaching all {result['agents']} agents ({result['lessons']} lessons)")
        ax.legend()

    return report.figure(path, draw)


def plot_bytes(result: dict[str, Any], path: Path) -> Path:
    n = result["agents"]

    def draw(ax: Any) -> None:
        rows = [("reconcile", "revision 2 (ranges)", "-")]
        if result["digests"] is not None:
            rows.append(("digests", "revision 1 (whole digests)", "--"))
        for key, label, style in rows:
            per_round = [b / n / 1024 for b in result[key]["bytes_per_round"]]
            ax.plot(range(1, len(per_round) + 1), per_round, style, label=label)
        ax.set_yscale("log")
        ax.set_xlabel("round")
        ax.set_ylabel("KiB per agent per round (all messages)")
        ax.set_title(f"Gossip traffic while everyone publishes, N = {n}")
        ax.legend()

    return report.figure(path, draw)


def summary(result: dict[str, Any]) -> str:
    rec, best, dig = result["reconcile"], result["ideal"], result["digests"]
    header = ["", "revision 2", "whole digests", "ideal push-pull"]

    def cell(part: dict[str, Any] | None, *keys: str) -> Any:
        value: Any = part
        for key in keys:
            if value is None:
                return None
            value = value.get(key)
        return value

    rows: list[list[Any]] = [
        ["rounds run", rec["rounds_run"], cell(dig, "rounds_run"), best["rounds_run"]],
        ["lessons reaching all", rec["lessons_reached_all"], cell(dig, "lessons_reached_all"),
         best["lessons_reached_all"]],
    ]
    for q in ("median", "p95", "max"):
        rows.append([f"periods to all, {q}", rec["periods_to_all"][q], cell(dig, "periods_to_all", q),
                     best["periods_to_all"][q]])
    rows += [
        ["real / ideal (median of ratios)", result["vs_ideal"]["ratio"]["median"],
         cell(dig, "vs_ideal", "ratio", "median"), 1.0],
        ["real / ideal (max)", result["vs_ideal"]["ratio"]["max"], cell(dig, "vs_ideal", "ratio", "max"), 1.0],
        ["bytes per agent per round", rec["bytes_per_agent_round"], cell(dig, "bytes_per_agent_round"), None],
        ["  revision 2 on the same rounds", rec["bytes_per_agent_round"],
         cell(dig, "reconcile_bytes_per_agent_round_same_rounds"), None],
        ["busiest agent, bytes per round", rec["busiest_agent_bytes_per_round"],
         cell(dig, "busiest_agent_bytes_per_round"), None],
        ["busiest agent, most in one round", rec["busiest_agent_one_round"], cell(dig, "busiest_agent_one_round"),
         None],
        ["round trips per exchange", rec["round_trips_per_exchange"], cell(dig, "round_trips_per_exchange"), None],
        ["exchanges in sync", rec["in_sync_fraction"], cell(dig, "in_sync_fraction"), None],
        ["errors", sum(rec["errors"].values()), None if dig is None else sum(dig["errors"].values()), None],
        ["CPU s", rec["cpu_s"], cell(dig, "cpu_s"), None],
        ["CPU ms per exchange", rec["cpu_ms_per_exchange"], cell(dig, "cpu_ms_per_exchange"), None],
    ]
    pr, pd = result["probe"]["reconcile"], result["probe"]["digests"]
    rows += [
        ["probe: rounds for one lesson", pr["rounds"], cell(pd, "rounds"), pr["ideal_rounds"]],
        ["probe: bytes per agent per round", pr["bytes_per_agent_round"], cell(pd, "bytes_per_agent_round"), None],
        ["probe: bytes of an exchange carrying it", pr["carrying_exchange_bytes"],
         cell(pd, "carrying_exchange_bytes"), None],
        ["probe: record bytes", pr["record_bytes"], cell(pd, "record_bytes"), None],
    ]
    title = (f"load: N = {result['agents']}, {result['lessons']} lessons in {result['days']} days "
             f"({result['rate_per_agent_week']:g} per agent per week), period {result['period_s']:g} s, "
             f"fanout {result['fanout']}, seed {result['seed']}")
    foot = (f"\nwall {result['wall_s']:.1f} s, CPU {result['cpu_s']:.1f} s, max RSS {result['rss_max_mb']:.0f} MB; "
            f"setup {result['setup_s']:.1f} s")
    return report.grid(header, rows, title=title) + foot
