"""``python -m simulations robustness``: faults, and how fast the network recovers once they end.

Three scenarios, each a fresh network of the real code (engine.py) with the same seed:

- ``loss``: every message is lost with probability ``--loss`` (20 %) for ``--fault-rounds``;
- ``partition``: the agents are split in two halves that cannot reach each other for
  ``--fault-rounds``, and a lesson is published on each side; then the halves heal;
- ``churn``: each round ``--churn`` (10 %) of the online agents leave and as many of the
  offline ones come back with the store they left with, for ``--fault-rounds``.

A lesson is published at round 0 (one per side for the partition).  After the fault
ends the network runs until every agent holds every lesson; the figure is the number of
rounds that took.  A ``none`` scenario (no fault) gives the baseline: rounds for the
lesson to reach everyone from a single agent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neverest.clock import iso
from neverest.records import sign_lesson
from simulations import report
from simulations.engine import Simulation, at, stream
from simulations.network import NetworkModel

SCENARIOS = ("none", "loss", "partition", "churn")


@dataclass
class Options:
    agents: int = 1000
    fanout: int = 1
    seed: int = 1
    loss: float = 0.2
    churn: float = 0.1
    fault_rounds: int = 10
    max_rounds: int = 200
    out: Path | None = None
    quiet: bool = False


def _scenario(opts: Options, fault: str) -> dict[str, Any]:
    sim = Simulation(opts.agents, seed=opts.seed, fanout=opts.fanout)
    try:
        n = opts.agents
        rng = stream(opts.seed, f"fault/{fault}")
        authors = [0]
        if fault == "partition":
            side = [0] * (n // 2) + [1] * (n - n // 2)
            rng.shuffle(side)
            sim.net.split(side)
            authors = [side.index(0), side.index(1)]
        wanted = []
        for k, a in enumerate(authors):
            agent = sim.agents[a]
            record = sign_lesson(agent.identity.signing_key, kind="surprise", seen=1, strength=0.8, seq=1,
                                 text=f"the staging database rejects connections for a minute after a deploy ({k})",
                                 updated=iso(at(0)))
            sim.publish(a, record)
            wanted.append(agent.origin)
        if fault == "loss":
            sim.net.model = NetworkModel(loss=opts.loss)

        def holding() -> int:
            return sum(all(ag.holds(o, 1) for o in wanted) for ag in sim.agents)

        curve: list[int] = []
        fault_end: int | None = None
        after: int | None = None
        with report.progress(None, f"robustness: {fault}", quiet=opts.quiet) as bar:
            while sim.round < opts.max_rounds:
                if fault == "churn" and sim.round < opts.fault_rounds:
                    sim.net.churn(opts.churn, rng)
                if sim.round == opts.fault_rounds or fault == "none":
                    sim.net.model = NetworkModel()
                    sim.net.heal()
                    sim.net.all_online()
                    fault_end = sim.round if fault_end is None else fault_end
                    if curve and curve[-1] == n:
                        after = 0  # the fault did not keep anyone from the lessons
                        break
                sim.run_round()
                curve.append(holding())
                bar.update(1)
                if fault_end is not None and curve[-1] == n:
                    after = sim.round - fault_end
                    break
        return {"fault": fault, "rounds_after_fault": after,
                "rounds_to_all": next((r + 1 for r, c in enumerate(curve) if c == n), None),
                "holding_at_fault_end": (curve[opts.fault_rounds - 1] / n
                                         if fault != "none" and len(curve) >= opts.fault_rounds else None),
                "failed_exchanges": sim.stats.failed, "exchanges": sim.stats.exchanges,
                "bytes_per_agent_round": sim.net.traffic.bytes / (n * len(curve)),
                "redundant_fraction": sim.stats.redundant / sim.stats.deliveries if sim.stats.deliveries else 0.0,
                "curve": [c / n for c in curve], "fault_rounds": 0 if fault == "none" else opts.fault_rounds}
    finally:
        sim.close()


def run(opts: Options) -> dict[str, Any]:
    started = time.perf_counter()
    scenarios = [_scenario(opts, fault) for fault in SCENARIOS]
    result: dict[str, Any] = {"experiment": "robustness", "agents": opts.agents, "fanout": opts.fanout,
                              "seed": opts.seed, "loss": opts.loss, "churn": opts.churn,
                              "fault_rounds": opts.fault_rounds, "scenarios": scenarios}
    result["wall_s"] = time.perf_counter() - started
    if opts.out is not None:
        result["plot"] = str(plot(result, opts.out / f"robustness-n{opts.agents}-s{opts.seed}.png"))
    return result


def plot(result: dict[str, Any], path: Path) -> Path:
    def draw(ax: Any) -> None:
        for s in result["scenarios"]:
            ax.plot(range(1, len(s["curve"]) + 1), s["curve"], "o-", markersize=3, label=s["fault"])
        ax.axvline(result["fault_rounds"] + 0.5, color="grey", linestyle="--", label="faults end")
        ax.set_xlabel("round")
        ax.set_ylabel("fraction of agents holding every lesson")
        ax.set_title(f"Robustness, N = {result['agents']}: {result['loss']:.0%} loss, partition, "
                     f"{result['churn']:.0%} churn")
        ax.legend()

    return report.figure(path, draw)


def summary(result: dict[str, Any]) -> str:
    rows = [(s["fault"], s["fault_rounds"], s["holding_at_fault_end"], s["rounds_to_all"], s["rounds_after_fault"],
             s["failed_exchanges"], s["bytes_per_agent_round"], s["redundant_fraction"])
            for s in result["scenarios"]]
    return report.grid(("fault", "fault rounds", "holding at fault end", "rounds to all", "rounds to all after",
                        "failed exchanges", "bytes/agent/round", "redundant"), rows,
                       title=f"robustness, N = {result['agents']}, fanout {result['fanout']} (seed {result['seed']})")
