"""The daemon's status (what the store holds, and what only a running daemon knows) and its metrics."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from neverest import __version__
from neverest.clock import iso
from neverest.config import config_warnings
from neverest.peers import table as peer_table
from neverest.services.nightly import next_sleep
from neverest.services.state import DaemonState

if TYPE_CHECKING:  # imported by the memory worker's first job (services/state.py): not by an idle daemon
    from neverest.memory.service import Memory


async def daemon_status(state: DaemonState) -> dict[str, Any]:
    def read(memory: Memory) -> tuple[dict[str, Any], list[peer_table.Address]]:
        return memory.status(), peer_table.listing(memory.store.db)

    held, addresses = await state.worker.read(read)
    held["refused"] = _with_pending(held.get("refused", []), state)
    return held | {
        "version": __version__, "pid": os.getpid(), "uptime_s": round(time.monotonic() - state.started, 1),
        "next_sleep": iso(next_sleep(state.clock.now(), state.config)), "listen": state.listening,
        "proxy": state.proxying,  # where the proxy for models listens ([] when proxy_listen is unset)
        "api": state.serving_api,  # where the JSON API listens ([] when api_listen is unset)
        "mdns": state.config.mdns,  # as it runs: --no-mdns overrides config.toml
        "peers": [{"url": a.url, "origin": a.origin, "source": a.source, "last_seen": a.last_seen, "score": a.score,
                   "ignored_until": a.ignored_until} for a in addresses],
        "last_round": state.last_round, "quiet_rounds": state.quiet_rounds, "exchanges": dict(state.exchanges),
        "warnings": config_warnings(state.config),
    }


async def metrics_text(state: DaemonState) -> str:
    """``GET /metrics``: the status in Prometheus text format."""
    from neverest.metrics import peer_health, render_metrics, snapshot_from_status  # asked for, not held idle

    status = await daemon_status(state)
    addresses = await state.worker.read(lambda memory: peer_table.listing(memory.store.db))
    health = peer_health(addresses, iso(state.clock.now()))
    return render_metrics(snapshot_from_status(status, exchanges=state.exchanges, peers=health))


def _with_pending(stored: list[dict[str, Any]], state: DaemonState) -> list[dict[str, Any]]:
    """The store's refusals plus those counted in memory since the last flush."""
    merged = {(r["source"], r["reason"]): dict(r) for r in stored}
    for r in state.pending_refusals():
        row = merged.setdefault((r.source, r.reason), {"source": r.source, "reason": r.reason, "count": 0,
                                                       "last": r.last})
        row["count"] += r.count
        row["last"] = max(row["last"], r.last)
    return [merged[k] for k in sorted(merged)]
