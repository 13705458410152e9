"""neverestctl commands of the network: status, peer add/remove/list, gossip."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from neverest.client import DAEMON_KEYS
from neverest.commands.common import UsageError, home_of, open_memory, through_daemon


def cmd_status(args: argparse.Namespace) -> int:
    answer = through_daemon(args, {"op": "status"}, timeout_s=10.0)
    if answer is not None:
        status = answer["status"]
        out: dict[str, Any] = {k: v for k, v in status.items() if k not in DAEMON_KEYS}
        out["daemon"] = {k: status.get(k) for k in DAEMON_KEYS}
    else:
        with open_memory(args) as memory:
            out = memory.status() | {"daemon": None}
    if args.json:
        print(json.dumps(out))
        return 0
    daemon = out["daemon"]
    if daemon is None:
        print(f"{'daemon':<12} not running")
    else:
        print(f"{'daemon':<12} up {daemon['uptime_s']:.0f} s, pid {daemon['pid']}; next sleep {daemon['next_sleep']}")
        print(f"{'listening':<12} {', '.join(daemon['listen']) or '-'}")
        if daemon.get("proxy"):
            print(f"{'proxy':<12} {', '.join(daemon['proxy'])} (models: /v1/chat/completions, /v1/messages)")
        if daemon.get("api"):
            print(f"{'api':<12} {', '.join(daemon['api'])} (POST /v1/<operation>, token in api-token)")
        last_round = daemon["last_round"]
        print(f"{'peers':<12} {len(daemon['peers'])} address(es); last round "
              + (f"{last_round['at']} with {len(last_round['exchanges'])} peer(s)" if last_round else "none yet"))
        for warning in daemon.get("warnings") or []:
            print(f"{'warning':<12} {warning}")
    for key in ("origin", "home", "episodes", "lessons", "records", "forks", "tombstones"):
        print(f"{key:<12} {out[key]}")
    print(f"{'last sleep':<12} {out['last_sleep'] or 'none yet'}")
    print(f"{'publishing':<12} {', '.join(out['published_projects']) or 'nothing'}")
    if out.get("held_back"):
        print(f"{'held back':<12} {out['held_back']} lesson(s) of those projects stay personal: their text holds what "
              "scrubbing removes or says nothing once scrubbed")
    hook = out.get("hook")
    if hook:
        print(f"{'agents':<12} {', '.join(hook['agents']) or 'none wired (neverestctl setup)'}")
        print(f"{'holdout':<12} {100 * hook['holdout']:.0f}% of agent sessions are given nothing, to measure the "
              f"difference; {hook['held_out']} of {hook['sessions']} session(s) seen were held out")
        for held in hook["recent_held_out"]:
            print(f"{'held out':<12} {held['session']}  first seen {held['first']}  {held['cwd'] or '-'}  "
                  f"({held['withheld']} lesson(s) withheld)")
    got = out.get("received")
    if got:
        cap = f"of {got['budget_bytes']} " if got["budget_bytes"] else "(no budget) "
        print(f"{'received':<12} {got['bytes']} bytes {cap}in {got['records']} record(s) from other origins; "
              f"{got['declined_origins']} origin(s) declined for the budget")
    refutations = out.get("refutations")
    if refutations:
        refused = ", ".join(f"{n} x {reason}" for reason, n in sorted(refutations["refused"].items()))
        print(f"{'refutations':<12} {refutations['held']} held" + (f"; refused {refused}" if refused else ""))
    for item in out["refused"]:
        print(f"refused      {item['count']} x {item['reason']} from {item['source']}")
    return 0


def cmd_peer_add(args: argparse.Namespace) -> int:
    from neverest.peers import table as peer_table

    try:
        wanted = peer_table.normalise_url(args.url)
    except peer_table.PeerError as exc:
        raise UsageError(str(exc)) from None
    # The daemon's own listen addresses are this memory: refuse them before anything is stored.
    status = through_daemon(args, {"op": "status"}, timeout_s=10.0)
    if status is not None and wanted in status["status"]["listen"]:
        raise UsageError(f"{wanted} is this memory's own daemon; add another memory's address")
    with open_memory(args) as memory, memory.store.write() as db:
        try:
            url = peer_table.add(db, args.url, source="manual", now=memory.clock.now(),
                                 own_origin=memory.identity.origin)
        except peer_table.PeerError as exc:
            raise UsageError(str(exc)) from None
    print(f"added {url}; its origin is learned at the first exchange")
    return 0


def cmd_peer_remove(args: argparse.Namespace) -> int:
    from neverest.peers import table as peer_table

    with open_memory(args) as memory, memory.store.write() as db:
        gone = peer_table.remove(db, args.peer)
    if not gone:
        print(f"neverestctl: no peer or address {args.peer}", file=sys.stderr)
        return 1
    print(f"removed {args.peer}")
    return 0


def cmd_peer_list(args: argparse.Namespace) -> int:
    from neverest.peers import table as peer_table

    with open_memory(args) as memory:
        addresses = peer_table.listing(memory.store.db)
    if not addresses and not args.json:
        print("no peers yet: neverestctl peer add HOST:PORT, or let zeroconf find them on the LAN")
    for a in addresses:
        if args.json:
            print(json.dumps({"url": a.url, "origin": a.origin, "source": a.source, "last_seen": a.last_seen,
                              "peer_last_seen": a.peer_seen, "score": a.score, "failures": a.failures,
                              "ignored_until": a.ignored_until,
                              "last_error": json.loads(a.last_error) if a.last_error else None}))
        else:
            state = f"ignored until {a.ignored_until}" if a.ignored_until else f"score {a.score:g}"
            # Seen by an exchange either way: a peer that only gossiped in was seen too.
            print(f"{a.url:<32} {a.origin or '(origin not known yet)':<22} {a.source:<9} "
                  f"last seen {a.heard or 'never'}; {state}")
    return 0


def cmd_gossip(args: argparse.Namespace) -> int:
    # Through the daemon when it runs: it owns the replay cache and the schedule.
    answer = through_daemon(args, {"op": "gossip", "peer": args.peer})
    results = answer["round"] if answer is not None else _gossip_here(args)
    if args.json:
        print(json.dumps({"round": results}))
    else:
        if not results:
            print("no healthy peer to gossip with (neverestctl peer add URL)")
        for r in results:
            outcome = f"error {r['error']['code']}: {r['error']['message']}" if r["error"] else (
                "this memory's own address: not used again" if r.get("self") else
                "in sync" if r["in_sync"] else f"sent {r['records_sent']}, received {r['records_received']}")
            print(f"{r['url']:<32} {r['peer'] or '?':<18} {outcome}  ({r['round_trips']} round trip(s), "
                  f"{r['bytes_sent'] + r['bytes_received']} bytes)")
    return 1 if any(r["error"] for r in results) else 0


def _gossip_here(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One round from this process, as the initiator, when no daemon runs."""
    import random

    import trio

    from neverest.gossip.service import Gossip
    from neverest.peers import table as peer_table
    with open_memory(args) as memory:
        identity, config, clock, home = memory.identity, memory.config, memory.clock, home_of(args)

    async def one_round() -> list[dict[str, Any]]:
        gossip = Gossip(home, config, clock, identity, random.SystemRandom())
        try:
            return await gossip.round(fanout=config.fanout, only=args.peer)
        finally:
            await gossip.aclose()
    try:
        results = trio.run(one_round)
    except peer_table.PeerError as exc:
        raise UsageError(str(exc)) from None
    if any(r.get("records_received") for r in results):
        with open_memory(args) as memory:
            memory.settle()  # what arrived is judged and rendered, as the daemon does after a round
    return results


