"""``python -m simulations EXPERIMENT ...``: each experiment reproducible from ``--seed``.

Every experiment prints a table (or, with ``--json``, one JSON object) on stdout, shows a
progress bar on stderr, and writes PNG plots into ``--out`` (``sim-out/`` by default;
``--no-plots`` to skip them).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from neverest.config import Config
from simulations import commons, dissemination, load, report, robustness, transports
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
    c.add_argument("--trust", choices=commons.POLICIES, default="vouched",
                   help="the honest agents' trust policy (default vouched, the best one)")
    c.add_argument("--nights", type=_positive, required=True)
    c.add_argument("--false-per-adversary", type=float, default=WorldOptions.false_per_adversary,
                   help="false lessons the adversaries publish, per adversary")
    c.add_argument("--no-fading", action="store_true", help="skip measuring fading_nights (the slow part)")
    c.add_argument("--exchange", choices=("ideal", "real"), default="ideal",
                   help="how records move: the ideal anti-entropy (default), or the real gossip engine (small N)")
    _common(c)

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
        world = WorldOptions(false_per_adversary=args.false_per_adversary)
        result = commons.run(commons.Options(
            agents=args.agents, adversaries=args.adversaries, nights=args.nights, trust=args.trust, seed=args.seed,
            world=world, config=Config(), fading=not args.no_fading, exchange=args.exchange, out=out,
            quiet=args.quiet))
        report.emit(result, commons.summary(result), as_json=args.json)
        return 0
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
