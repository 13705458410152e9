"""``python -m simulations dissemination``: how fast one new lesson reaches every agent.

One agent signs a lesson (the real ``sign_lesson``) and holds it; every agent then gossips
with the real code (engine.py), round after round, until every agent holds it.  The same
contacts are replayed through the ideal push-pull model (ideal.py): ``ratio`` is real
rounds over ideal rounds, so it measures the protocol and the network, not the luck of
the draw.  ``redundant_fraction`` counts records carried to an agent that already held
them, as the receive function counted them; the textbook synchronous model is reported
for reference.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulations import ideal, report
from simulations.engine import Holders, Simulation, first_lesson
from simulations.network import NetworkModel


@dataclass
class Options:
    agents: int
    fanout: int = 1
    seed: int = 1
    loss: float = 0.0
    max_rounds: int = 200
    out: Path | None = None
    quiet: bool = False


def run(opts: Options) -> dict[str, Any]:
    started = time.perf_counter()
    sim = Simulation(opts.agents, seed=opts.seed, fanout=opts.fanout, network=NetworkModel(loss=opts.loss))
    try:
        return _run(sim, opts, started)
    finally:
        sim.close()


def _run(sim: Simulation, opts: Options, started: float) -> dict[str, Any]:
    n = opts.agents
    setup_s = time.perf_counter() - started
    holders = Holders(sim, first_lesson(sim), first=0)
    curve: list[int] = []
    with report.progress(None, f"dissemination N={n}", quiet=opts.quiet) as bar:
        while holders.count < n and sim.round < opts.max_rounds:
            sim.run_round()
            curve.append(holders.count)
            bar.update(1)
            bar.set_postfix(holding=f"{holders.count}/{n}")
    rounds = len(curve) if holders.count == n else None
    traffic = sim.net.traffic.bytes
    stats = sim.stats
    redundant = stats.redundant / stats.deliveries if stats.deliveries else 0.0
    # One more round with everyone holding the lesson: what agents in sync pay.
    in_sync_before, in_sync_bytes_before = stats.in_sync, stats.in_sync_bytes_total
    sim.run_round()
    in_sync_round = stats.in_sync - in_sync_before
    ideal_curve = ideal.same_contacts(sim.schedule, 0, max_rounds=opts.max_rounds)
    ideal_rounds = len(ideal_curve) if ideal_curve[-1] == n else None
    textbook = ideal.synchronous(n, opts.fanout, opts.seed)
    result: dict[str, Any] = {
        "experiment": "dissemination",
        "agents": n,
        "fanout": opts.fanout,
        "seed": opts.seed,
        "loss": opts.loss,
        "rounds": rounds,
        "ideal_rounds": ideal_rounds,
        "ratio": rounds / ideal_rounds if rounds and ideal_rounds else None,
        "textbook_rounds": len(textbook),
        "log3_agents": ideal.log3(n),
        "bytes_per_agent_round": traffic / (n * len(curve)) if curve else 0.0,
        "redundant_fraction": redundant,
        "deliveries": stats.deliveries,
        "exchanges": stats.exchanges,
        "failed_exchanges": stats.failed,
        "in_sync_bytes_max": stats.in_sync_bytes_max,
        "in_sync_bytes_mean_after": ((stats.in_sync_bytes_total - in_sync_bytes_before) / in_sync_round
                                     if in_sync_round else None),
        "setup_s": setup_s,
        "wall_s": time.perf_counter() - started,
        "curve": curve,
        "ideal_curve": ideal_curve,
        "textbook_curve": textbook,
    }
    if opts.out is not None:
        result["plot"] = str(plot(result, opts.out / f"dissemination-n{n}-f{opts.fanout}-s{opts.seed}.png"))
    return result


def plot(result: dict[str, Any], path: Path) -> Path:
    n = result["agents"]

    def draw(ax: Any) -> None:
        for key, label, style in (("curve", "Neverest gossip (real code)", "o-"),
                                  ("ideal_curve", "ideal push-pull, same contacts", "s--"),
                                  ("textbook_curve", "synchronous push-pull (textbook)", "^:")):
            ys = [c / n for c in result[key]]
            ax.plot(range(1, len(ys) + 1), ys, style, label=label, markersize=4)
        ax.set_xlabel(f"round (gossip period; fanout {result['fanout']})")
        ax.set_ylabel("fraction of agents holding the lesson")
        ax.set_title(f"Dissemination of one lesson, N = {n}, loss = {result['loss']:g}")
        ax.legend()

    return report.figure(path, draw)


def summary(result: dict[str, Any]) -> str:
    keys = ("agents", "fanout", "loss", "rounds", "ideal_rounds", "ratio", "textbook_rounds", "log3_agents",
            "bytes_per_agent_round", "redundant_fraction", "in_sync_bytes_max", "failed_exchanges", "wall_s")
    return report.table([(k, result[k]) for k in keys], title=f"dissemination (seed {result['seed']})")
