"""What an experiment shows: a progress bar, a table in the terminal, JSON, PNG plots.

The progress bar goes to stderr (tqdm), so that ``--json`` output on stdout stays clean.
Plots are drawn with matplotlib's Agg backend: no display needed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm


def progress(total: int | None, what: str, *, quiet: bool = False, unit: str = "round") -> tqdm[Any]:
    return tqdm(total=total, desc=what, unit=unit, file=sys.stderr, disable=quiet, leave=False,
                dynamic_ncols=True)


def table(rows: Sequence[tuple[str, Any]], *, title: str) -> str:
    """Two aligned columns: name, value."""
    width = max(len(name) for name, _ in rows)
    lines = [title, "-" * len(title)]
    for name, value in rows:
        lines.append(f"{name:<{width}}  {_fmt(value)}")
    return "\n".join(lines)


def grid(header: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str) -> str:
    """A table with a header row."""
    cells = [list(map(str, header))] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[c]) for r in cells) for c in range(len(header))]
    lines = [title, "-" * len(title)]
    for k, row in enumerate(cells):
        lines.append("  ".join(v.rjust(w) if k else v.ljust(w) for v, w in zip(row, widths, strict=True)))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if value is None:
        return "-"
    return str(value)


def emit(result: dict[str, Any], text: str, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print(text)


def figure(path: Path, draw: Any) -> Path:
    """Draw with ``draw(ax)`` and save a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    try:
        draw(ax)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
