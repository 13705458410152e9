"""``GET /metrics``: the daemon's state in the Prometheus text exposition format, version 0.0.4.

The daemon fills a ``MetricsSnapshot`` (from its status and its counters) and
``render_metrics`` writes it out.  Every metric is prefixed ``neverest_``; counters
end in ``_total``.  Label values come from the store and, through refusal reasons
and sources, from what peers sent, so they are escaped (backslash, double quote,
newline) and the number of series is capped: a flood of distinct refusals cannot
grow the answer without bound.

Metrics:

- ``neverest_build_info{version, origin}`` 1
- ``neverest_uptime_seconds``
- ``neverest_records`` (signed records held), ``neverest_episodes``, ``neverest_lessons`` (not archived)
- ``neverest_exchanges_total{outcome}``: gossip exchanges since the daemon started, by outcome
- ``neverest_refusals_total{source, reason}``: refused inputs, as counted in the store
  (``over-budget``: records refused for the storage budget; ``evicted`` from source ``budget``:
  records it evicted)
- ``neverest_received_bytes``, ``neverest_received_budget_bytes``: bytes of records held from other
  origins, and the budget for them (memory/budget.py; 0: none)
- ``neverest_peers{health}``: known peer addresses by health
- ``neverest_last_sleep_timestamp_seconds``: when the last sleep started (absent before the first)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
PREFIX: Final = "neverest_"
MAX_SERIES: Final = 500  # per labelled metric; the rest are summed into one series labelled "other"
OTHER: Final = "other"


@dataclass(frozen=True)
class Refusal:
    source: str
    reason: str
    count: int


@dataclass(frozen=True)
class MetricsSnapshot:
    """What ``/metrics`` reports.  ``exchanges``: outcome (e.g. "ok", "failed", "refused") to count since
    start; ``peers``: health (e.g. "healthy", "backoff") to count of addresses."""

    version: str
    origin: str
    uptime_s: float
    records: int
    episodes: int
    lessons: int
    exchanges: Mapping[str, int] = field(default_factory=dict)
    refusals: Sequence[Refusal] = ()
    peers: Mapping[str, int] = field(default_factory=dict)
    last_sleep_unix: float | None = None
    received_bytes: int = 0  # bytes of records held from other origins (the storage budget's measure)
    received_budget_bytes: int = 0


def escape_label(value: str) -> str:
    """A label value as the format requires it: backslash, double quote and line feed escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 2**53):
        return str(int(value))
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _capped(series: Iterable[tuple[tuple[str, ...], float]], width: int) -> list[tuple[tuple[str, ...], float]]:
    """Sum duplicates; keep the MAX_SERIES largest label sets, sum the rest into one ("other", ...)."""
    sums: dict[tuple[str, ...], float] = {}
    for labels, value in series:
        sums[labels] = sums.get(labels, 0) + value
    if len(sums) <= MAX_SERIES:
        return sorted(sums.items())
    ranked = sorted(sums.items(), key=lambda item: (-item[1], item[0]))
    kept, rest = dict(ranked[:MAX_SERIES - 1]), ranked[MAX_SERIES - 1:]
    other = (OTHER,) * width
    kept[other] = kept.get(other, 0) + sum(value for _, value in rest)
    return sorted(kept.items())


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def metric(self, name: str, kind: str, help_text: str, label_names: tuple[str, ...],
               series: Iterable[tuple[tuple[str, ...], float]]) -> None:
        full = PREFIX + name
        self.lines.append(f"# HELP {full} {_escape_help(help_text)}")
        self.lines.append(f"# TYPE {full} {kind}")
        for labels, value in (_capped(series, len(label_names)) if label_names else series):
            if label_names:
                pairs = ",".join(f'{n}="{escape_label(v)}"' for n, v in zip(label_names, labels, strict=True))
                self.lines.append(f"{full}{{{pairs}}} {_number(value)}")
            else:
                self.lines.append(f"{full} {_number(value)}")


def render_metrics(snapshot: MetricsSnapshot) -> str:
    """The snapshot as a Prometheus 0.0.4 text page (serve it with ``CONTENT_TYPE``)."""
    w = _Writer()
    w.metric("build_info", "gauge", "The running Neverest: its version and this memory's origin (always 1).",
             ("version", "origin"), [((snapshot.version, snapshot.origin), 1)])
    w.metric("uptime_seconds", "gauge", "Seconds since the daemon started.", (), [((), snapshot.uptime_s)])
    w.metric("records", "gauge", "Signed records held in the store.", (), [((), snapshot.records)])
    w.metric("episodes", "gauge", "Episodes held in the store.", (), [((), snapshot.episodes)])
    w.metric("lessons", "gauge", "Lessons held and not archived.", (), [((), snapshot.lessons)])
    w.metric("exchanges_total", "counter", "Gossip exchanges since the daemon started, by outcome.", ("outcome",),
             [((outcome,), n) for outcome, n in snapshot.exchanges.items()])
    w.metric("refusals_total", "counter", "Refused inputs (records, requests), by source and reason.",
             ("source", "reason"), [((r.source, r.reason), r.count) for r in snapshot.refusals])
    w.metric("received_bytes", "gauge", "Bytes of records held from other origins.", (),
             [((), snapshot.received_bytes)])
    w.metric("received_budget_bytes", "gauge", "The budget for records received (0: none).", (),
             [((), snapshot.received_budget_bytes)])
    w.metric("peers", "gauge", "Known peer addresses, by health.", ("health",),
             [((health,), n) for health, n in snapshot.peers.items()])
    w.metric("last_sleep_timestamp_seconds", "gauge", "When the last sleep started, in Unix seconds.", (),
             [((), snapshot.last_sleep_unix)] if snapshot.last_sleep_unix is not None else [])
    return "\n".join(w.lines) + "\n"


class _Address(Protocol):
    @property
    def last_seen(self) -> str | None: ...
    @property
    def ignored_until(self) -> str | None: ...


def peer_health(addresses: Iterable[_Address], now_iso: str) -> dict[str, int]:
    """Peer addresses by health: "backoff" (ignored after failures until a later time), "healthy" (answered
    at least once), "unseen" (never answered yet).  ``now_iso`` is a time as ``clock.iso`` writes it."""
    health: Counter[str] = Counter({"healthy": 0, "backoff": 0, "unseen": 0})
    for address in addresses:
        if address.ignored_until is not None and address.ignored_until > now_iso:
            health["backoff"] += 1
        elif address.last_seen is None:
            health["unseen"] += 1
        else:
            health["healthy"] += 1
    return dict(health)


def unix_seconds(stamp: str | None) -> float | None:
    """An ISO 8601 time (as Neverest writes them, ``...Z``) in Unix seconds; None for none or garbage."""
    if not stamp:
        return None
    try:
        at = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at.timestamp() if at.tzinfo is not None else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def snapshot_from_status(status: Mapping[str, Any], *, exchanges: Mapping[str, int] | None = None,
                         peers: Mapping[str, int] | None = None) -> MetricsSnapshot:
    """A snapshot from the daemon's ``status`` answer as it is today (version, origin, uptime_s, records,
    episodes, lessons, refused: [{source, reason, count}], last_sleep); missing or odd fields count as
    zero.  ``exchanges`` and ``peers`` (health to count) come from the daemon's own counters."""
    refused = status.get("refused")
    refusals = [Refusal(str(r.get("source", "")), str(r.get("reason", "")), _int(r.get("count")))
                for r in (refused if isinstance(refused, list) else []) if isinstance(r, dict)]
    uptime = status.get("uptime_s")
    last_sleep = status.get("last_sleep")
    got = status.get("received")
    got = got if isinstance(got, dict) else {}
    return MetricsSnapshot(
        version=str(status.get("version", "")), origin=str(status.get("origin", "")),
        uptime_s=float(uptime) if isinstance(uptime, int | float) and not isinstance(uptime, bool) else 0.0,
        records=_int(status.get("records")), episodes=_int(status.get("episodes")),
        lessons=_int(status.get("lessons")), exchanges=dict(exchanges or {}), refusals=refusals,
        peers=dict(peers or {}), last_sleep_unix=unix_seconds(last_sleep if isinstance(last_sleep, str) else None),
        received_bytes=_int(got.get("bytes")), received_budget_bytes=_int(got.get("budget_bytes")))
