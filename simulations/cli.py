"""``python -m simulations EXPERIMENT ...``: each experiment reproducible from ``--seed``.

Every experiment prints a table (or, with ``--json``, one JSON object) on stdout, shows a
progress bar on stderr, and writes PNG plots into ``--out`` (``sim-out/`` by default;
``--no-plots`` to skip them).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from simulations import dissemination, report


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
    raise AssertionError(args.experiment)
