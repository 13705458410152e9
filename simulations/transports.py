"""``python -m simulations transports``: one new lesson by gossip, and through the HTTP commons.

Agent 0 signs a lesson (the real ``sign_lesson``) and holds it at virtual time 0, among N
agents.  The same agents (same identities, so the very same record bytes) then share it
in two ways, one after the other, and the experiment reports for each how long until
every agent holds it and how many bytes it took.

**Gossip** is ``Simulation`` (engine.py), set up exactly as dissemination.py does it:
rounds of the daemon's gossip period (``gossip_every_s``, 900 s) with ``fanout`` peers
each, until every agent holds the lesson (or the horizon of ``days`` days ends).
``reach_s`` is rounds × period.  Bytes are message bodies as the virtual network carries
them; the network is wrapped to count what each agent receives as well as what it sends.

**The HTTP commons** is the real thing: ``commons_server.CommonsApp`` served by hypercorn
(``serving.serve_asgi``, what ``commons_server.serve`` uses) in a thread of its own with
its own trio loop, on 127.0.0.1 port 0, over a temporary data folder; the agents use the
real ``commons_client`` over loopback sockets, each with its own bearer token.  Every
agent sleeps once a virtual day at its own time of day, drawn from the stream
``"{seed}/sleeps"`` (a daemon sleeps nightly at a fixed ``sleep_at``); at each sleep it
does what the daemon does after one (``Daemon._commons``): ``push``, then ``pull``, then
``commons_pass``.  Sleeps run one at a time in virtual-time order, so the server sees
requests in the order the virtual clock says.  ``reach_s`` is the virtual time of the
pull that gave the last agent the lesson.  A thin ASGI wrapper around the app counts the
body bytes of every request and response, per agent (told apart by their tokens): the
server is the centre, so ``bytes_centre`` is everything that went through it.

**Warm or cold.**  By default the commons starts *warm*: before t = 0 every agent has
pushed its (empty) file for real, and every agent's client remembers every file and the
index as a full pull would have left them, so what is measured is what one new lesson
costs a commons in use.  Remembering is done by writing the client's own memo (the
``commons_client`` helpers) instead of N real pulls, which would be N² requests: one real
pull then checks that the client agrees it is up to date (index answered 304, no file
fetched), and the run stops if it does not.  ``cold`` starts from an empty commons as a
new deployment would: every first push is a new origin, so every agent fetches every
other agent's file once, about N² requests over the first two days (minutes at N = 200).

**Bytes.**  Only bodies are counted on both sides: gossip messages are the bodies of the
daemon's HTTP POSTs, whose headers are not modelled either.  The commons' header bytes
(request headers as hypercorn hands them over, response headers as the app sends them)
are reported apart, because its polls answered 304 carry no body at all.  ``bytes_per_agent``
is the mean over agents of what each sent and received: for gossip every byte has an agent
at both ends, so it is 2 × ``bytes_total`` / N; for the commons one end is the server, so
it is ``bytes_total`` / N.  ``bytes_centre`` is the busiest agent's sent + received for
gossip (it has no centre) and the server's whole traffic for the commons.
``idle_bytes_per_day`` is what the same agents pay once everyone holds the lesson: one
more gossip round scaled to a day, and one more day of sleeps for the commons.  Gossip
bytes are counted until the round that reached everyone; commons bytes over the whole
horizon of ``days`` days (``bytes_total_at_reach`` gives them at the reaching pull).

What is left out: the sleep itself (``Memory.sleep``) and the daemon's gossip round at
the end of each sleep; the commons' directory announcements (``commons_announce`` is off
by default); gossip faults (no loss, no churn); real time on the commons side (only the
order of requests follows the virtual clock, the server's ``updated`` is its wall clock).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio

from neverest.clock import FixedClock
from neverest.config import Config
from neverest.gossip.service import settings_of
from neverest.memory.service import Memory
from neverest.serving import Receive, Send, serve_asgi
from neverest.transports import commons_client
from neverest.transports.adapters import CommonsTransport
from neverest.transports.commons_server import CommonsApp
from simulations import report
from simulations.engine import Agent, Holders, Simulation, at, first_lesson, lesson_record, stream
from simulations.network import VirtualNetwork

DAY_S = 86_400.0
START_TIMEOUT_S = 30.0  # for the server to open its data folder and bind
STOP_TIMEOUT_S = 30.0  # for hypercorn to close (its graceful timeout is 2 s)


@dataclass
class Options:
    agents: int
    fanout: int = 3
    seed: int = 1
    days: int = 3
    out: Path | None = None
    quiet: bool = False
    cold: bool = False  # start from an empty commons instead of one every agent already uses


# -- arguments ------------------------------------------------------------------------------


def _at_least(low: int) -> Callable[[str], int]:
    # Not cli._positive: cli imports the experiments, so importing it from here would be circular.
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{text} is less than {low}")
        return value

    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agents", type=_at_least(2), required=True)
    p.add_argument("--fanout", type=_at_least(1), default=3, help="gossip peers per round (default 3)")
    p.add_argument("--days", type=_at_least(1), default=3,
                   help="virtual days of nightly sleeps for the commons (default 3)")
    p.add_argument("--cold", action="store_true",
                   help="start from an empty commons: every agent reads every other file once (N² requests)")


def options_from(args: argparse.Namespace, out: Path | None) -> Options:
    return Options(agents=args.agents, fanout=args.fanout, seed=args.seed, days=args.days, out=out,
                   quiet=args.quiet, cold=args.cold)


# -- the run ----------------------------------------------------------------------------------


def sleep_offsets(n: int, seed: int) -> list[float]:
    """Each agent's time of day for its nightly sleep, in seconds after midnight (virtual)."""
    rng = stream(seed, "sleeps")
    return [rng.uniform(0.0, DAY_S) for _ in range(n)]


def run(opts: Options) -> dict[str, Any]:
    if opts.agents < 2:
        raise ValueError("a network needs at least 2 agents")
    if opts.days < 1 or opts.fanout < 1:
        raise ValueError("days and fanout must be at least 1")
    started = time.perf_counter()
    gossip = _gossip(opts)
    commons = _commons(opts)
    result: dict[str, Any] = {
        "experiment": "transports",
        "agents": opts.agents,
        "fanout": opts.fanout,
        "seed": opts.seed,
        "days": opts.days,
        "cold": opts.cold,
        "gossip": gossip,
        "commons": commons,
        "wall_s": time.perf_counter() - started,
    }
    if opts.out is not None:
        result["plot"] = str(plot(result, opts.out / f"transports-n{opts.agents}-s{opts.seed}.png"))
    return result


def _reach(reach_s: float | None) -> dict[str, float | None]:
    return {"reach_s": reach_s, "reach_h": None if reach_s is None else reach_s / 3600}


# -- gossip -----------------------------------------------------------------------------------


@dataclass
class _CountingNetwork(VirtualNetwork):
    """The virtual network, also counting the bytes each agent receives (it counts only sent)."""

    received_by: list[int] = field(init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.received_by = [0] * self.n

    def carry(self, src: int, dst: int, size: int) -> float | None:
        delay = super().carry(src, dst, size)
        if delay is not None:
            self.received_by[dst] += size
        return delay


def _gossip(opts: Options) -> dict[str, Any]:
    started = time.perf_counter()
    n = opts.agents
    sim = Simulation(n, seed=opts.seed, fanout=opts.fanout)
    try:
        # Swapped before the first message, with the same model and random stream: the run is the
        # one dissemination.py would make, message for message.
        net = _CountingNetwork(n, sim.net.model, sim.net.rng)
        sim.net = net
        holders = Holders(sim, first_lesson(sim), first=0)
        curve = holders.curve
        # The same horizon as the commons: a lesson that has not spread in `days` days has not.
        max_rounds = math.ceil(opts.days * DAY_S / sim.period_s)
        with report.progress(max_rounds, f"gossip N={n}", quiet=opts.quiet) as bar:
            while curve[-1][1] < n and sim.round < max_rounds:
                sim.run_round()
                bar.update(1)
                bar.set_postfix(holding=f"{curve[-1][1]}/{n}")
        reached = curve[-1][1] == n
        rounds = sim.round
        total = net.traffic.bytes
        links = [s + r for s, r in zip(net.sent_by, net.received_by, strict=True)]
        messages, exchanges = net.traffic.messages, sim.stats.exchanges
        idle = None
        if reached:
            # One more round with everyone in sync: what gossip keeps paying once it has spread.
            sim.run_round()
            idle = (net.traffic.bytes - total) * DAY_S / sim.period_s
        return {
            **_reach(rounds * sim.period_s if reached else None),
            "bytes_total": total,
            "bytes_centre": max(links),
            "bytes_per_agent": sum(links) / n,
            "bytes_total_at_reach": total,
            "idle_bytes_per_day": idle,
            "rounds": rounds,
            "period_s": sim.period_s,
            "messages": messages,
            "exchanges": exchanges,
            "curve": [[t, c] for t, c in curve],
            "wall_s": time.perf_counter() - started,
        }
    finally:
        sim.close()


# -- the HTTP commons: counting what goes through the server -----------------------------------

Scope = dict[str, Any]


@dataclass
class _Tally:
    """What went through the server: body and header bytes per agent, requests by kind."""

    body: list[int]  # per agent; the last slot is for a token that is no agent's (there should be none)
    headers: list[int]
    requests: dict[str, int] = field(default_factory=dict)  # "GET index 304" -> count

    def copy(self) -> _Tally:
        return _Tally(list(self.body), list(self.headers), dict(self.requests))

    def since(self, before: _Tally) -> _Tally:
        return _Tally([a - b for a, b in zip(self.body, before.body, strict=True)],
                      [a - b for a, b in zip(self.headers, before.headers, strict=True)],
                      {k: v - before.requests.get(k, 0) for k, v in self.requests.items()
                       if v != before.requests.get(k, 0)})

    def count(self, method: str, kind: str, status: int | None = None) -> int:
        return sum(v for k, v in self.requests.items()
                   if k.startswith(f"{method} {kind} ") and (status is None or k.endswith(f" {status}")))


def _header_bytes(headers: Any) -> int:
    return sum(len(name) + len(value) + 4 for name, value in headers)  # "name: value\r\n"


class _Counting:
    """ASGI wrapper around the commons app counting every byte of every body, per agent.

    Agents are told apart by their bearer tokens.  Runs in the server's thread; the main
    thread reads ``tally`` only between requests (the client makes one at a time), and every
    count is made before the bytes it counts are handed on, so once a client has its answer
    the tally already holds it."""

    def __init__(self, app: CommonsApp, tokens: list[str]) -> None:
        self.app = app
        self.agent_of = {f"Bearer {t}".encode(): i for i, t in enumerate(tokens)}
        self.tally = _Tally([0] * (len(tokens) + 1), [0] * (len(tokens) + 1))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", [])
        auth = next((value for name, value in headers if name == b"authorization"), b"")
        who = self.agent_of.get(auth, len(self.tally.body) - 1)
        path: str = scope["path"]
        kind = "index" if path == "/commons/index" else "file" if path.startswith("/commons/") else "other"
        tally = self.tally
        tally.headers[who] += _header_bytes(headers)

        async def counted_receive() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "http.request":
                tally.body[who] += len(message.get("body", b""))
            return message

        async def counted_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                key = f"{scope['method']} {kind} {message['status']}"
                tally.requests[key] = tally.requests.get(key, 0) + 1
                tally.headers[who] += _header_bytes(message.get("headers", []))
            elif message["type"] == "http.response.body":
                tally.body[who] += len(message.get("body", b""))
            await send(message)

        await self.app(scope, counted_receive, counted_send)


@contextlib.contextmanager
def _commons_server(tokens: list[str]) -> Iterator[tuple[str, _Counting]]:
    """The real commons server on 127.0.0.1 (a free port), in a thread with its own trio loop,
    over a temporary data folder that is removed afterwards.  Yields its URL and its counter."""
    folder = Path(tempfile.mkdtemp(prefix="neverest-sim-commons-"))
    ready: queue.Queue[tuple[str, _Counting, trio.lowlevel.TrioToken, trio.CancelScope] | BaseException] = \
        queue.Queue()
    failure: list[BaseException] = []
    try:
        tokens_file = folder / "tokens"
        tokens_file.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
        tokens_file.chmod(0o600)  # else the server warns that others can read it

        async def serve() -> None:
            # Opened inside the loop: its rate limiter and token re-check read trio's clock.
            app = CommonsApp.open(folder / "data", tokens_file)
            try:
                async with trio.open_nursery() as nursery:
                    counting = _Counting(app, tokens)
                    binds = await nursery.start(functools.partial(
                        serve_asgi, counting, "127.0.0.1:0", logger="neverest.commons.hypercorn"))
                    ready.put((binds[0], counting, trio.lowlevel.current_trio_token(), nursery.cancel_scope))
            finally:
                app.close()

        def main() -> None:
            try:
                trio.run(serve)
            except BaseException as exc:  # handed to the main thread, which re-raises it
                failure.append(exc)
                ready.put(exc)

        thread = threading.Thread(target=main, name="commons-server", daemon=True)
        thread.start()
        try:
            started = ready.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            raise RuntimeError(f"the commons server did not start within {START_TIMEOUT_S:g} s") from None
        if isinstance(started, BaseException):
            raise RuntimeError(f"the commons server did not start: {started!r}") from started
        url, counting, trio_token, scope = started
        try:
            yield url, counting
        finally:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(scope.cancel, trio_token=trio_token)
            thread.join(STOP_TIMEOUT_S)
            if thread.is_alive():
                raise RuntimeError(f"the commons server did not stop within {STOP_TIMEOUT_S:g} s")
        if failure:
            raise RuntimeError(f"the commons server failed: {failure[0]!r}") from failure[0]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- the HTTP commons: the run -----------------------------------------------------------------


def _tokens(n: int) -> list[str]:
    # One token per agent, so the counter can tell agents apart and no agent's rate limit is shared.
    return [f"neverest-sim-agent-{i:06d}" for i in range(n)]


def _sleep(agent: Agent, url: str, token: str, config: Config, t: float) -> dict[str, Any] | None:
    """What the daemon does with the commons after a sleep, at virtual time t: the memory
    service's own sync (sign what is pending, push, pull, judge), on the agent's store."""
    memory = Memory(agent.store, agent.identity, config, FixedClock(at(t)))
    out = memory.sync(CommonsTransport(url, token))
    if "error" in out:
        return None  # the daemon logs it and carries on until the next sleep
    pulled: dict[str, Any] = out["pull"]
    return pulled


def _warm_up(agents: list[Agent], url: str, tokens: list[str], config: Config, counting: _Counting) -> None:
    """Leave the commons and every client as they are once every agent has pushed and pulled."""
    for agent, token in zip(agents, tokens, strict=True):
        commons_client.push(agent.store, agent.identity, url, token)
    base = commons_client.base_url(url)
    with httpx.Client(headers={"authorization": f"Bearer {tokens[0]}"}, timeout=30.0) as client:
        answer = client.get(f"{base}/commons/index")
        answer.raise_for_status()
    index_etag, entries = answer.headers["etag"], answer.json()
    for agent in agents:
        # What each client remembers after pulling everything, written with the client's own
        # helpers: N real pulls would cost N² requests (see --cold).
        memo = commons_client.load_memo(agent.store, base)
        memo["index"] = index_etag
        memo["files"] = {e["origin"]: e["etag"] for e in entries if e["origin"] != agent.origin}
        commons_client.save_memo(agent.store, base, memo)
    before = counting.tally.copy()
    check = commons_client.pull(agents[-1].store, agents[-1].identity, url, tokens[-1], config, at(0))
    if (check.file_requests, counting.tally.since(before).count("GET", "index", 304)) != (0, 1):
        raise RuntimeError("the warm start does not leave commons_client up to date (its memo format changed?); "
                           "run with cold=True")


def _commons(opts: Options) -> dict[str, Any]:
    started = time.perf_counter()
    n, config = opts.agents, Config()
    settings = settings_of(config.sections.gossip)
    # The gossip run's agents again (same seed, same identities), each with a fresh store.
    agents = [Agent(i, opts.seed, config, settings) for i in range(n)]
    tokens = _tokens(n)
    try:
        with _commons_server(tokens) as (url, counting):
            return _commons_run(opts, agents, url, tokens, config, counting) | {
                "wall_s": time.perf_counter() - started}
    finally:
        for agent in agents:
            agent.close()


def _commons_run(opts: Options, agents: list[Agent], url: str, tokens: list[str], config: Config,
                 counting: _Counting) -> dict[str, Any]:
    n = opts.agents
    if not opts.cold:
        _warm_up(agents, url, tokens, config, counting)
    baseline = counting.tally.copy()  # the warm-up happened before t = 0: not counted
    author = agents[0]
    author.own(lesson_record(author), at(0))
    offsets = sleep_offsets(n, opts.seed)
    # One more day after the horizon, run only once everyone holds the lesson: the idle cost.
    sleeps = sorted((day * DAY_S + offsets[i], i) for day in range(opts.days + 1) for i in range(n))
    horizon = opts.days * DAY_S
    held = [False] * n
    held[0] = True
    curve: list[tuple[float, int]] = [(0.0, 1)]
    at_reach: _Tally | None = None
    at_horizon: _Tally | None = None
    polls = empty = errors = 0
    with report.progress(len(sleeps), f"commons N={n}", quiet=opts.quiet) as bar:
        bar.unit = "sleep"
        for t, i in sleeps:
            if t >= horizon and at_horizon is None:
                at_horizon = counting.tally.since(baseline)
                if at_reach is None:
                    break
            pulled = _sleep(agents[i], url, tokens[i], config, t)
            bar.update(1)
            if pulled is None:
                errors += 1
                continue
            if t >= horizon:
                continue
            polls += 1
            empty += pulled["total"]["accepted"] == 0
            if not held[i] and agents[i].holds(author.origin, 1):
                held[i] = True
                curve.append((t, curve[-1][1] + 1))
                bar.set_postfix(holding=f"{curve[-1][1]}/{n}")
                if curve[-1][1] == n:
                    at_reach = counting.tally.since(baseline)
    end = counting.tally.since(baseline)
    if at_horizon is None:  # no sleep after the horizon: n and days are at least 1, so never
        at_horizon = end
    per_agent = at_horizon.body[:n]
    total = sum(at_horizon.body)
    return {
        **_reach(curve[-1][0] if at_reach is not None else None),
        "bytes_total": total,
        "bytes_centre": total,  # everything goes through the server
        "bytes_per_agent": sum(per_agent) / n,
        "bytes_busiest_agent": max(per_agent),
        "bytes_total_at_reach": sum(at_reach.body) if at_reach is not None else None,
        "idle_bytes_per_day": sum(end.since(at_horizon).body) if at_reach is not None else None,
        "header_bytes": sum(at_horizon.headers),
        "requests": sum(at_horizon.requests.values()),
        "requests_by_kind": dict(sorted(at_horizon.requests.items())),
        "pushes": at_horizon.count("PUT", "file"),
        "polls": polls,
        "empty_polls": empty,
        "index_not_modified": at_horizon.count("GET", "index", 304),
        "file_requests": at_horizon.count("GET", "file"),
        "errors": errors,
        "curve": [[t, c] for t, c in curve],
    }


# -- what it shows ------------------------------------------------------------------------------


def plot(result: dict[str, Any], path: Path) -> Path:
    n = result["agents"]
    end_h = result["days"] * DAY_S / 3600

    def draw(ax: Any) -> None:
        for key, label, style in (("gossip", f"gossip (fanout {result['fanout']}, every "
                                             f"{result['gossip']['period_s'] / 60:g} min)", "-"),
                                  ("commons", "HTTP commons (push + pull at each nightly sleep)", "--")):
            curve = result[key]["curve"]
            xs = [t / 3600 for t, _ in curve] + [end_h]
            ys = [c / n for _, c in curve] + [curve[-1][1] / n]
            ax.step(xs, ys, style, where="post", label=label)
        # Linear up to one hour, logarithmic after: gossip spreads within hours, the commons
        # within a day, and both must be readable on one axis.
        ax.set_xscale("symlog", linthresh=1.0, linscale=0.5)
        ax.set_xlim(0, end_h)
        ticks = [t for t in (0, 0.25, 0.5, 1, 2, 4, 8, 12, 24, 48, 72, 96, 168) if t <= end_h]
        ax.set_xticks(ticks, labels=[f"{t:g}" for t in ticks])
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("virtual time since the lesson was published (hours; linear to 1 h, then logarithmic)")
        ax.set_ylabel("fraction of agents holding the lesson")
        ax.set_title(f"One lesson among N = {n} agents, seed {result['seed']}")
        # Below the axes: the two curves leave no corner free at every N.
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize="small", frameon=False)

    return report.figure(path, draw)


def summary(result: dict[str, Any]) -> str:
    rows = []
    for key in ("gossip", "commons"):
        r = result[key]
        rows.append((key, r["reach_h"], r["bytes_total"], r["bytes_centre"], r["bytes_per_agent"],
                     r["idle_bytes_per_day"], r["exchanges"] if key == "gossip" else r["requests"]))
    start = "cold" if result["cold"] else "warm"
    table = report.grid(("transport", "reach (h)", "bytes total", "bytes at centre", "bytes per agent",
                         "idle bytes/day", "exchanges|requests"), rows,
                        title=f"transports: N = {result['agents']}, fanout {result['fanout']}, {result['days']} days "
                              f"({start} commons), seed {result['seed']}")
    c = result["commons"]
    notes = (f"gossip: {result['gossip']['rounds']} rounds, bytes until the round that reached everyone; "
             f"centre = busiest agent\n"
             f"commons: {c['polls']} polls, {c['empty_polls']} found nothing new ({c['index_not_modified']} "
             f"answered 304), {c['file_requests']} file requests, {c['errors']} errors; bodies only "
             f"(+{c['header_bytes']} header bytes); centre = the server\n"
             f"wall {result['wall_s']:.1f} s (gossip {result['gossip']['wall_s']:.1f} s, "
             f"commons {c['wall_s']:.1f} s)")
    return f"{table}\n{notes}"
