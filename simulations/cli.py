"""``python -m simulations EXPERIMENT ...``: each experiment reproducible from ``--seed``.

Every experiment prints a table (or, with ``--json``, one JSON object) on stdout, shows a
progress bar on stderr, and writes PNG plots into ``--out`` (``sim-out/`` by default;
``--no-plots`` to skip them).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from neverest.commons import TrustConfig
from neverest.config import Config
from simulations import commons, dissemination, load, report, robustness, sweep, transports
from simulations.adversaries import STRATEGIES
from simulations.world import WorldOptions


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=1, help="the run's seed: the same seed gives the same result")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--out", type=Path, default=Path("sim-out"), help="folder for the PNG plots (default sim-out)")
    p.add_argument("--no-plots", action="store_true", help="do not draw plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction in [0, 1)")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _ints(text: str) -> tuple[int, ...]:
    """``30,100,1000`` or ``1-10`` (or both: ``1-3,7``): positive integers, each once, in order."""
    values: list[int] = []
    try:
        for part in text.split(","):
            first, _, last = part.partition("-")
            values.extend(range(int(first), int(last or first) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list like 30,100,1000 or a range like 1-10") from None
    if not values or min(values) < 1 or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r} must name positive integers, each once")
    return tuple(values)


def _strategies(text: str) -> tuple[str, ...]:
    if text == "all":
        return STRATEGIES
    names = tuple(text.split(","))
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r}: name strategies once each, from {', '.join(STRATEGIES)}, "
                                         "or all")
    return names


def _sybils(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number of Sybil keys (0 or more)")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is not a count (0 or more)")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m simulations", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="experiment", required=True)
    d = sub.add_parser("dissemination", help="rounds for one new lesson to reach every agent, against ideal push-pull")
    d.add_argument("--agents", type=_positive, required=True)
    d.add_argument("--fanout", type=_positive, default=1)
    d.add_argument("--loss", type=_fraction, default=0.0, help="probability that a message is lost")
    d.add_argument("--max-rounds", type=_positive, default=200)
    _common(d)

    c = sub.add_parser("commons", help="do true lessons become common, and false ones never, under a trust policy")
    c.add_argument("--agents", type=_positive, required=True)
    c.add_argument("--adversaries", type=_fraction, required=True, help="fraction of the agents that are adversaries")
    c.add_argument("--trust", choices=commons.POLICIES, default="earned",
                   help="the honest agents' trust policy (default earned, the daemon's default)")
    c.add_argument("--nights", type=_positive, required=True)
    c.add_argument("--false-per-adversary", type=float, default=WorldOptions.false_per_adversary,
                   help="false lessons the adversaries publish, per adversary")
    c.add_argument("--strategy", choices=STRATEGIES, default="collude",
                   help="what the adversaries do (simulations/adversaries.py; default collude)")
    c.add_argument("--sybils", type=_sybils, default=WorldOptions.sybils_per_adversary,
                   help=f"Sybil keys per adversary (default {WorldOptions.sybils_per_adversary}; "
                        "sybil-swarm sets its own)")
    c.add_argument("--corroboration", type=_count, default=TrustConfig.corroboration,
                   help="earned: first claims of counted origins an origin must bear out to corroborate "
                        f"(default {TrustConfig.corroboration}; 0: nobody corroborates, the rule before it)")
    c.add_argument("--no-fading", action="store_true", help="skip measuring fading_nights (the slow part)")
    c.add_argument("--exchange", choices=("ideal", "real"), default="ideal",
                   help="how records move: the ideal anti-entropy (default), or the real gossip engine (small N)")
    _common(c)

    sw = sub.add_parser("sweep", help="the commons experiment for every strategy, N and seed, against the "
                                      "targets (exit 1 if a cell misses them)")
    sw.add_argument("--agents", type=_ints, default=sweep.Options.agents, help="sizes, e.g. 30,100,1000 (default)")
    sw.add_argument("--seeds", type=_ints, default=sweep.Options.seeds, help="seeds, e.g. 1-10 (default)")
    sw.add_argument("--strategies", type=_strategies, default=STRATEGIES,
                    help="comma-separated strategies, or all (default)")
    sw.add_argument("--trust", choices=commons.POLICIES, default=sweep.Options.trust,
                    help=f"the honest agents' trust policy (default {sweep.Options.trust})")
    sw.add_argument("--corroboration", type=_count, default=sweep.Options.corroboration,
                    help=f"earned: as for commons (default {sweep.Options.corroboration}; 0: off)")
    sw.add_argument("--nights", type=_positive, default=sweep.Options.nights)
    sw.add_argument("--sybils", type=_sybils, default=sweep.Options.sybils,
                    help=f"Sybil keys per adversary (default {sweep.Options.sybils})")
    sw.add_argument("--workers", type=_positive, default=sweep.Options.workers,
                    help="processes running cells (default 2; the figures do not depend on it)")
    sw.add_argument("--json", action="store_true", help="print one JSON object (every cell) instead of the table")
    sw.add_argument("--out", type=Path, default=Path("sim-out"),
                    help="folder for sweep.md and the PNG plots (default sim-out)")
    sw.add_argument("--no-plots", action="store_true", help="write neither sweep.md nor plots")
    sw.add_argument("--quiet", action="store_true", help="no progress bar")

    r = sub.add_parser("robustness", help="loss, a partition that heals, churn: rounds to converge after each")
    r.add_argument("--agents", type=_positive, default=1000)
    r.add_argument("--fanout", type=_positive, default=1)
    r.add_argument("--loss", type=_fraction, default=0.2)
    r.add_argument("--churn", type=_fraction, default=0.1, help="fraction of online agents replaced each round")
    r.add_argument("--fault-rounds", type=_positive, default=10)
    _common(r)

    ld = sub.add_parser("load", help="everyone publishes for a week: rounds to reach all and bytes, against "
                                     "whole digests and ideal push-pull")
    ld.add_argument("--agents", type=_positive, required=True)
    ld.add_argument("--rate", type=float, default=load.Options.rate, help="lessons per agent per week (default 1)")
    ld.add_argument("--days", type=_positive, default=load.Options.days)
    ld.add_argument("--period", type=float, default=load.Options.period_s,
                    help="the modelled gossip period in seconds (default 14400: see simulations/load.py)")
    ld.add_argument("--fanout", type=_positive, default=load.Options.fanout)
    ld.add_argument("--baseline-rounds", type=int, default=None,
                    help="rounds of the whole-digest run (default: as many as revision 2's; 0: none)")
    ld.add_argument("--probe-baseline-rounds", type=int, default=None,
                    help="rounds of the whole-digest probe (default: until everyone holds it; 0: none)")
    ld.add_argument("--workers", type=_positive, default=load.Options.workers,
                    help="processes for the run's independent parts (default 2; the result does not depend on it)")
    _common(ld)

    t = sub.add_parser("transports", help="one new lesson by gossip and through the HTTP commons: bytes and time")
    transports.add_arguments(t)
    _common(t)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = None if args.no_plots else args.out
    if out is not None:
        # Before any run: a folder that cannot be written would otherwise fail only once every figure is made.
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            print(f"python -m simulations: error: --out {out}: cannot write plots there ({e.strerror})",
                  file=sys.stderr)
            return 2
    if args.experiment == "dissemination":
        if args.agents < 2:
            parser().error("--agents must be at least 2")
        result = dissemination.run(dissemination.Options(
            agents=args.agents, fanout=args.fanout, seed=args.seed, loss=args.loss, max_rounds=args.max_rounds,
            out=out, quiet=args.quiet))
        report.emit(result, dissemination.summary(result), as_json=args.json)
        return 0 if result["rounds"] is not None else 1
    if args.experiment == "commons":
        if args.agents < 2:
            parser().error("--agents must be at least 2")
        world = WorldOptions(false_per_adversary=args.false_per_adversary, sybils_per_adversary=args.sybils)
        result = commons.run(commons.Options(
            agents=args.agents, adversaries=args.adversaries, nights=args.nights, trust=args.trust, seed=args.seed,
            world=world, config=Config(), trust_config=TrustConfig(corroboration=args.corroboration),
            strategy=args.strategy, fading=not args.no_fading, exchange=args.exchange, out=out, quiet=args.quiet))
        report.emit(result, commons.summary(result), as_json=args.json)
        return 0
    if args.experiment == "sweep":
        if min(args.agents) < 2:
            parser().error("--agents must be at least 2")
        result = sweep.run(sweep.Options(
            agents=args.agents, seeds=args.seeds, strategies=args.strategies, trust=args.trust,
            corroboration=args.corroboration, nights=args.nights, sybils=args.sybils, workers=args.workers, out=out,
            quiet=args.quiet))
        report.emit(result, sweep.summary(result), as_json=args.json)
        return 0 if result["passed"] else 1
    if args.experiment == "robustness":
        if args.agents < 2:
            parser().error("--agents must be at least 2")
        result = robustness.run(robustness.Options(
            agents=args.agents, fanout=args.fanout, seed=args.seed, loss=args.loss, churn=args.churn,
            fault_rounds=args.fault_rounds, out=out, quiet=args.quiet))
        report.emit(result, robustness.summary(result), as_json=args.json)
        return 0 if all(s["rounds_after_fault"] is not None for s in result["scenarios"]) else 1
    if args.experiment == "load":
        if args.agents < 2:
            parser().error("--agents must be at least 2")
        if args.rate < 0 or args.period <= 0:
            parser().error("--rate must not be negative and --period must be positive")
        result = load.run(load.Options(
            agents=args.agents, rate=args.rate, days=args.days, period_s=args.period, fanout=args.fanout,
            seed=args.seed, baseline_rounds=args.baseline_rounds, probe_baseline_rounds=args.probe_baseline_rounds,
            workers=args.workers, out=out, quiet=args.quiet))
        report.emit(result, load.summary(result), as_json=args.json)
        return 0 if result["reconcile"]["lessons_reached_all"] == result["lessons"] else 1
    if args.experiment == "transports":
        result = transports.run(transports.options_from(args, out))
        report.emit(result, transports.summary(result), as_json=args.json)
        return 0
    raise AssertionError(args.experiment)
