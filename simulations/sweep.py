"""``python -m simulations sweep``: the commons experiment over every strategy, size and seed.

Each cell is one commons run (commons.py, without the fading measurement): a strategy of
the adversaries (adversaries.py), N agents of which ``adversaries`` (30 %) lie, with
``sybils`` Sybil keys each, for ``nights`` nights, under the trust policy ``trust``, from
one seed.  Cells run in ``workers`` processes; a cell's result depends only on its
options, so the figures do not depend on ``workers`` (only the wall times do).

One row per (strategy, N), over its seeds: the smallest and the mean
``true_common_fraction``, the two ceilings that explain a shortfall (the smallest
``true_witnessed_fraction``, what the world allows, and ``true_counted_fraction``, what the
policy leaves; commons.py) with the most ``honest_uncounted``, the largest ``false_common``
and ``false_common_peak_fraction``, the mean wall time of a run, and PASS or FAIL against the targets of issue 14, which
every seed must meet: ``true_common_fraction`` >= 0.95 (>= 0.90 under ``refute-spam``),
``false_common`` = 0 and a peak <= 1 % of honest agents.  The exit status is 0 when every
row passes.  The same table is written as Markdown (``OUT/sweep.md``), followed by every seed of
the rows that fail, and one plot per
row (``OUT/sweep-STRATEGY-nN.png``): the true lessons common at >= 95 % of honest agents
and the honest agents with a false lesson common, night by night, the mean over seeds
with the range from the smallest to the largest.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from neverest.commons import TrustConfig
from neverest.config import Config
from simulations import commons, report
from simulations.adversaries import STRATEGIES
from simulations.world import WorldOptions

TRUE_TARGET: Final = 0.95
TRUE_TARGET_UNDER: Final = {"refute-spam": 0.90}
PEAK_TARGET: Final = 0.01
# The figures a cell keeps (the rest of a commons result is the world's settings, the same in every cell).
_KEPT: Final = ("agents", "seed", "strategy", "trust", "sybils", "honest_agents", "true_lessons", "false_lessons",
                "true_common_fraction", "true_witnessed_fraction", "true_counted_fraction",
                "honest_uncounted", "honest_unheard", "false_common", "false_common_peak_fraction",
                "revoked_everywhere", "forged_held_by_honest", "records", "refutations", "true_common_by_night",
                "false_peak_by_night", "wall_s")


@dataclass(frozen=True)
class Options:
    agents: tuple[int, ...] = (30, 100, 1000)
    seeds: tuple[int, ...] = tuple(range(1, 11))
    strategies: tuple[str, ...] = STRATEGIES
    trust: str = "earned"
    corroboration: int = TrustConfig.corroboration  # earned: 0 turns corroboration off (the rule before it)
    nights: int = 30
    sybils: int = 10
    adversaries: float = 0.3
    workers: int = 2
    world: WorldOptions = field(default_factory=WorldOptions)
    config: Config = field(default_factory=Config)
    out: Path | None = None
    quiet: bool = False


@dataclass(frozen=True)
class Cell:
    strategy: str
    agents: int
    seed: int


def cells(opts: Options) -> list[Cell]:
    """Every cell, the costliest first (larger N, then the Sybil swarm), so that the workers end together."""
    every = [Cell(s, n, seed) for s in opts.strategies for n in opts.agents for seed in opts.seeds]
    return sorted(every, key=lambda c: (-c.agents, c.strategy != "sybil-swarm", opts.strategies.index(c.strategy),
                                        c.seed))


def run_cell(opts: Options, cell: Cell) -> dict[str, Any]:
    result = commons.run(commons.Options(
        agents=cell.agents, adversaries=opts.adversaries, nights=opts.nights, trust=opts.trust, seed=cell.seed,
        world=replace(opts.world, sybils_per_adversary=opts.sybils), config=opts.config,
        trust_config=TrustConfig(corroboration=opts.corroboration), strategy=cell.strategy, fading=False,
        quiet=True))
    return {k: result[k] for k in _KEPT}


def _results(opts: Options, todo: list[Cell]) -> Iterator[tuple[Cell, dict[str, Any]]]:
    if opts.workers == 1:
        for cell in todo:
            yield cell, run_cell(opts, cell)
        return
    # fork: the workers start with this process's imports, and each cell is a pure function of its options.
    with ProcessPoolExecutor(opts.workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = {pool.submit(run_cell, opts, cell): cell for cell in todo}
        for future in as_completed(futures):
            yield futures[future], future.result()


def true_target(strategy: str) -> float:
    return TRUE_TARGET_UNDER.get(strategy, TRUE_TARGET)


def row(strategy: str, agents: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One (strategy, N) over its seeds, and whether every seed meets the targets."""
    trues = [r["true_common_fraction"] for r in runs]
    known = [t for t in trues if t is not None]
    false_common = max(r["false_common"] for r in runs)
    peak = max(r["false_common_peak_fraction"] for r in runs)
    true_min = min(known) if len(known) == len(trues) else None  # a run without true lessons meets nothing
    passed = (true_min is not None and true_min >= true_target(strategy) and false_common == 0
              and peak <= PEAK_TARGET)
    return {
        "strategy": strategy, "agents": agents, "seeds": len(runs), "sybils": runs[0]["sybils"],
        "true_common_fraction_min": true_min,
        "true_common_fraction_mean": statistics.fmean(known) if known else None,
        # The ceiling the world allows (commons.py: true lessons met by support_n + 1 honest agents).
        "true_witnessed_fraction_min": min((r["true_witnessed_fraction"] for r in runs
                                            if r.get("true_witnessed_fraction") is not None), default=None),
        # The ceiling left under the policy: true lessons enough honest supporters of which count (commons.py).
        "true_counted_fraction_min": min((r["true_counted_fraction"] for r in runs
                                          if r.get("true_counted_fraction") is not None), default=None),
        "honest_uncounted_max": max(r.get("honest_uncounted", 0) for r in runs),
        "honest_unheard_max": max(r.get("honest_unheard", 0) for r in runs),
        "false_common_max": false_common, "false_common_peak_fraction_max": peak,
        "wall_s_mean": statistics.fmean(r["wall_s"] for r in runs), "wall_s_total": sum(r["wall_s"] for r in runs),
        "passed": passed,
    }


def run(opts: Options) -> dict[str, Any]:
    if opts.trust not in commons.POLICIES:
        raise ValueError(f"--trust must be one of {', '.join(commons.POLICIES)}")
    started = time.perf_counter()
    todo = cells(opts)
    done: dict[Cell, dict[str, Any]] = {}
    with report.progress(len(todo), f"sweep trust={opts.trust}", quiet=opts.quiet, unit="run") as bar:
        for cell, figures in _results(opts, todo):
            done[cell] = figures
            bar.update(1)
            bar.set_postfix(last=f"{cell.strategy} N={cell.agents} s{cell.seed}: {figures['wall_s']:.0f}s")
    rows = []
    for strategy in opts.strategies:
        for agents in opts.agents:
            runs = [done[Cell(strategy, agents, seed)] for seed in opts.seeds]
            rows.append(row(strategy, agents, runs))
    result: dict[str, Any] = {
        "experiment": "sweep",
        "trust": opts.trust, "corroboration": opts.corroboration, "nights": opts.nights,
        "adversaries": opts.adversaries,
        "sybils_per_adversary": opts.sybils, "agents": list(opts.agents), "seeds": list(opts.seeds),
        "strategies": list(opts.strategies), "workers": opts.workers,
        "targets": {"true_common_fraction": TRUE_TARGET, "true_common_fraction_under": dict(TRUE_TARGET_UNDER),
                    "false_common": 0, "false_common_peak_fraction": PEAK_TARGET},
        "rows": rows,
        "passed": all(r["passed"] for r in rows),
        "cells": [dict(done[c], strategy=c.strategy) for c in sorted(done, key=_cell_order(opts))],
        "world": dict(opts.world.__dict__),
    }
    result["wall_s"] = time.perf_counter() - started
    if opts.out is not None:
        opts.out.mkdir(parents=True, exist_ok=True)
        markdown = opts.out / "sweep.md"
        markdown.write_text(table_markdown(result), encoding="utf-8")
        result["markdown"] = str(markdown)
        result["plots"] = [str(plot(opts, strategy, agents, [done[Cell(strategy, agents, s)] for s in opts.seeds]))
                           for strategy in opts.strategies for agents in opts.agents]
    return result


def _cell_order(opts: Options) -> Any:
    return lambda c: (opts.strategies.index(c.strategy), c.agents, c.seed)


_HEADER: Final = ("strategy", "N", "seeds", "true min", "true mean", "witnessed min", "counted min",
                  "uncounted max", "unheard max", "false_common max", "peak max", "wall s/run", "result")
_SEED_HEADER: Final = ("strategy", "N", "seed", "true", "witnessed", "counted", "uncounted", "unheard", "false_common",
                       "peak")


def _cells_of(r: dict[str, Any]) -> list[Any]:
    return [r["strategy"], r["agents"], r["seeds"], r["true_common_fraction_min"], r["true_common_fraction_mean"],
            r["true_witnessed_fraction_min"], r["true_counted_fraction_min"], r["honest_uncounted_max"],
            r["honest_unheard_max"], r["false_common_max"], r["false_common_peak_fraction_max"],
            round(r["wall_s_mean"], 1), "PASS" if r["passed"] else "FAIL"]


def summary(result: dict[str, Any]) -> str:
    title = (f"sweep: trust {result['trust']}, {result['adversaries']:.0%} adversaries with "
             f"{result['sybils_per_adversary']} Sybil keys each, {result['nights']} nights, seeds "
             f"{_span(result['seeds'])}; {result['wall_s']:.0f} s on {result['workers']} workers")
    verdict = "every cell meets its targets" if result["passed"] else "some cell misses its targets (FAIL)"
    return report.grid(_HEADER, (_cells_of(r) for r in result["rows"]), title=title) + "\n" + verdict


def table_markdown(result: dict[str, Any]) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3g}"
        return "-" if v is None else str(v)

    lines = [
        f"`--trust {result['trust']}`"
        + (f" `--corroboration {result['corroboration']}`" if result.get("corroboration", 1) != 1 else "")
        + f", {result['adversaries']:.0%} adversaries with {result['sybils_per_adversary']} "
        f"Sybil keys each (sybil-swarm: 10 per honest agent), {result['nights']} nights, seeds "
        f"{_span(result['seeds'])}; targets: true min >= 0.95 (>= 0.90 under refute-spam), false_common 0, "
        f"peak <= 0.01 in every seed. Whole sweep "
        f"{result['wall_s'] / 60:.1f} min on {result['workers']} workers.",
        "",
        "| " + " | ".join(_HEADER) + " |",
        "|" + "---|" * len(_HEADER),
    ]
    for r in result["rows"]:
        cells_ = _cells_of(r)
        cells_[-1] = "**PASS**" if r["passed"] else "**FAIL**"
        lines.append("| " + " | ".join(fmt(v) for v in cells_) + " |")
    failed = {(r["strategy"], r["agents"]) for r in result["rows"] if not r["passed"]}
    if failed:
        lines += ["", "Every seed of the rows that FAIL: `witnessed`, the true lessons that more than `support_n` "
                  "honest agents met; `counted`, those of them that, at >= 95 % of honest agents, more than "
                  "`support_n` of their honest supporters count (or at least `support_n` count and the rest "
                  "corroborate); `uncounted`, the honest agents that fewer than 95 % of the other honest agents "
                  "count; `unheard`, those that fewer than 95 % count or take as corroborating.", "",
                  "| " + " | ".join(_SEED_HEADER) + " |", "|" + "---|" * len(_SEED_HEADER)]
        for c in result["cells"]:
            if (c["strategy"], c["agents"]) in failed:
                values = [c["strategy"], c["agents"], c["seed"], c["true_common_fraction"],
                          c["true_witnessed_fraction"], c.get("true_counted_fraction"), c.get("honest_uncounted"),
                          c.get("honest_unheard"), c["false_common"], c["false_common_peak_fraction"]]
                lines.append("| " + " | ".join(fmt(v) for v in values) + " |")
    return "\n".join(lines) + "\n"


def _span(seeds: Sequence[int]) -> str:
    ordered = sorted(seeds)
    if ordered == list(range(ordered[0], ordered[-1] + 1)) and len(ordered) > 2:
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(map(str, ordered))


def plot(opts: Options, strategy: str, agents: int, runs: list[dict[str, Any]]) -> Path:
    def draw(ax: Any) -> None:
        nights = range(1, opts.nights + 1)
        for key, label, style in (
                ("true_common_by_night", "true lessons common at ≥ 95 % of honest agents", "o-"),
                ("false_peak_by_night", "honest agents with a false lesson common", "s-")):
            per_night = list(zip(*(r[key] for r in runs), strict=True))
            line = ax.plot(nights, [statistics.fmean(v) for v in per_night], style, markersize=3,
                           label=f"{label} (mean of {len(runs)} seeds)")[0]
            ax.fill_between(nights, [min(v) for v in per_night], [max(v) for v in per_night],
                            color=line.get_color(), alpha=0.2)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("night")
        ax.set_ylabel("fraction (band: min to max over seeds)")
        ax.set_title(f"{strategy}, N = {agents}, {opts.adversaries:.0%} adversaries × {opts.sybils} Sybils, "
                     f"trust = {opts.trust}")
        ax.legend(loc="center right", fontsize="small")

    assert opts.out is not None
    return report.figure(opts.out / f"sweep-{strategy}-n{agents}.png", draw)
