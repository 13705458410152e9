"""neverestctl commands of the network: status, peer add/remove/list, gossip."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from neverest.commands.common import UsageError, open_memory
from neverest.control import ControlError, ask
from neverest.memory import publish
from neverest.paths import resolve_home
from neverest.peers import table as peer_table


def cmd_status(args: argparse.Namespace) -> int:
    home = resolve_home(args.home)
    try:  # what only the daemon knows (uptime, last sleep...), when one runs
        daemon: dict[str, Any] | None = ask(home, {"op": "status"}, timeout_s=10.0)["status"]
    except ControlError:
        daemon = None
    with open_memory(args) as memory:
        db = memory.store.db
        last = db.execute("SELECT started FROM sleeps WHERE finished IS NOT NULL ORDER BY id DESC LIMIT 1").fetchone()
        out: dict[str, Any] = {
            "origin": memory.identity.origin,
            "home": str(memory.home),
            "episodes": db.execute("SELECT count(*) FROM episodes").fetchone()[0],
            "lessons": db.execute("SELECT count(*) FROM lessons WHERE archived = 0").fetchone()[0],
            "records": db.execute("SELECT count(*) FROM records").fetchone()[0],
            "forks": db.execute("SELECT count(*) FROM forks").fetchone()[0],
            "tombstones": db.execute("SELECT count(*) FROM tombstones").fetchone()[0],
            "last_sleep": last[0] if last else None,
            "published_projects": [p for p, _ in publish.projects(memory.store)],
            "refused": [{"source": s, "reason": r, "count": n, "last": t} for s, r, n, t in db.execute(
                "SELECT source, reason, count, last FROM refusals ORDER BY source, reason")],
        }
    out["daemon"] = daemon
    if args.json:
        print(json.dumps(out))
        return 0
    if daemon is None:
        print(f"{'daemon':<12} not running")
    else:
        print(f"{'daemon':<12} up {daemon['uptime_s']:.0f} s; last sleep {daemon['last_sleep'] or 'none yet'}; "
              f"next {daemon['next_sleep']}")
        print(f"{'listening':<12} {', '.join(daemon['listen']) or '-'}")
        last_round = daemon["last_round"]
        print(f"{'peers':<12} {len(daemon['peers'])} address(es); last round "
              + (f"{last_round['at']} with {len(last_round['exchanges'])} peer(s)" if last_round else "none yet"))
    for key in ("origin", "home", "episodes", "lessons", "records", "forks", "tombstones", "last_sleep"):
        print(f"{key:<12} {out[key]}")
    print(f"{'publishing':<12} {', '.join(out['published_projects']) or 'nothing'}")
    for item in out["refused"]:
        print(f"refused      {item['count']} x {item['reason']} from {item['source']}")
    return 0


def cmd_peer_add(args: argparse.Namespace) -> int:
    with open_memory(args) as memory, memory.store.write() as db:
        try:
            url = peer_table.add(db, args.url, source="manual", now=memory.clock.now())
        except peer_table.PeerError as exc:
            raise UsageError(str(exc)) from None
    print(f"added {url}; its origin is learned at the first exchange")
    return 0


def cmd_peer_remove(args: argparse.Namespace) -> int:
    with open_memory(args) as memory, memory.store.write() as db:
        gone = peer_table.remove(db, args.peer)
    if not gone:
        print(f"neverestctl: no peer or address {args.peer}", file=sys.stderr)
        return 1
    print(f"removed {args.peer}")
    return 0


def cmd_peer_list(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        addresses = peer_table.listing(memory.store.db)
    for a in addresses:
        if args.json:
            print(json.dumps({"url": a.url, "origin": a.origin, "source": a.source, "last_seen": a.last_seen,
                              "score": a.score, "failures": a.failures, "ignored_until": a.ignored_until,
                              "last_error": json.loads(a.last_error) if a.last_error else None}))
        else:
            state = f"ignored until {a.ignored_until}" if a.ignored_until else f"score {a.score:g}"
            print(f"{a.url:<32} {a.origin or '(origin not known yet)':<22} {a.source:<9} "
                  f"last seen {a.last_seen or 'never'}; {state}")
    return 0


def cmd_gossip(args: argparse.Namespace) -> int:
    home = resolve_home(args.home)
    try:  # through the daemon when it runs: it owns the replay cache and the schedule
        results = ask(home, {"op": "gossip", "peer": args.peer})["round"]
    except ControlError as exc:
        if "no daemon" not in str(exc):
            raise UsageError(str(exc)) from None
        results = _gossip_here(args)
    if args.json:
        print(json.dumps({"round": results}))
    else:
        if not results:
            print("no healthy peer to gossip with (neverestctl peer add URL)")
        for r in results:
            outcome = f"error {r['error']['code']}: {r['error']['message']}" if r["error"] else (
                "in sync" if r["in_sync"] else f"sent {r['records_sent']}, received {r['records_received']}")
            print(f"{r['url']:<32} {r['peer'] or '?':<18} {outcome}  ({r['round_trips']} round trip(s), "
                  f"{r['bytes_sent'] + r['bytes_received']} bytes)")
    return 1 if any(r["error"] for r in results) else 0


def _gossip_here(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One round from this process, as the initiator, when no daemon runs."""
    import random

    import trio

    from neverest.gossip.service import Gossip
    with open_memory(args) as memory:
        identity, config, clock, home = memory.identity, memory.config, memory.clock, memory.home

    async def one_round() -> list[dict[str, Any]]:
        gossip = Gossip(home, config, clock, identity, random.SystemRandom())
        try:
            return await gossip.round(fanout=config.fanout, only=args.peer)
        finally:
            gossip.close()
    try:
        return trio.run(one_round)
    except peer_table.PeerError as exc:
        raise UsageError(str(exc)) from None


