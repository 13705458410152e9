"""``neverestctl trust add ORIGIN [--note TEXT] | remove ORIGIN | list``: the origins this memory's owner
names, and who is trusted here and why.

Named origins are kept in the store (table ``trusted``), beside config.toml's ``trust_allow``, which
the command reads and never writes (the person's file stays as written).  When a daemon runs, ``add``
and ``remove`` go through it: it writes the change and judges every lesson again at once, so the next
verdicts count the change, with no restart.  Without one they write the store and judge here.
Why the store and not config.toml: PROTOCOL.md §9, "Named origins".
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from neverest.commands.common import UsageError, open_memory, through_daemon
from neverest.memory.service import OwnerError
from neverest.memory.trusted import CONFIG, CORROBORATES, EARNED, NAMED, PEER, THROUGH

# Corroborating origins can be many (every key that bore out a trusted first claim): the text lists this many.
SHOWN_CORROBORATING = 20


def _write(args: argparse.Namespace, action: str) -> dict[str, Any]:
    note = getattr(args, "note", None)
    answer = through_daemon(args, {"op": "trust", "action": action, "origin": args.origin, "note": note})
    if answer is not None:
        return dict(answer["result"])
    try:
        with open_memory(args) as memory:
            return memory.name(args.origin, note=note) if action == "add" else memory.unname(args.origin)
    except OwnerError as exc:
        raise UsageError(str(exc)) from None


def cmd_trust_add(args: argparse.Namespace) -> int:
    result = _write(args, "add")
    if args.json:
        print(json.dumps(result))
    else:
        told = "named" if result["new"] else "already named" + ("; note replaced" if result["note"] is not None else "")
        print(f"{told} {result['origin']}: its support counts here from now on, under every trust policy")
    return 0


def cmd_trust_remove(args: argparse.Namespace) -> int:
    result = _write(args, "remove")
    if args.json:
        print(json.dumps(result))
    elif result["removed"]:
        print(f"no longer named: {result['origin']}"
              + (" (it is still in config.toml's trust_allow, which this command does not edit)"
                 if result["in_config"] else ""))
    if result["removed"]:
        return 0
    if not args.json:
        where = ("it is named in config.toml's trust_allow: remove it there (this command does not edit the "
                 "config)" if result["in_config"] else "it is not named here (neverestctl trust list)")
        print(f"neverestctl: {result['origin']} was not removed: {where}", file=sys.stderr)
    return 1


def _why(e: dict[str, Any], support_n: int) -> str:
    parts = []
    for reason in e["reasons"]:
        if reason == NAMED:
            parts.append(f"named by you {e['added'][:10]}" + (f" ({e['note']})" if e["note"] else ""))
        elif reason == CONFIG:
            parts.append("named in config.toml (trust_allow)")
        elif reason == EARNED and e["trust"] is not None:
            parts.append(f"earned: {e['first_claims']} of its first claims came true here (trust {e['trust']:.3g})")
        elif reason == EARNED:
            parts.append(f"earned: {e['first_claims']} lesson(s) it supported came true here")
        elif reason == THROUGH:
            parts.append(f"from a trusted memory: trust {e['trust']:.3g}, passed on mostly by {e['via'] or '?'}")
        elif reason == CORROBORATES:
            parts.append(f"corroborates: bore out {e['borne']} lesson(s) counted origins claimed first; its support "
                         f"counts beside {support_n} counted ones")
        elif reason == PEER:
            parts.append("peer" + ("" if e["counts"] or e["corroborates"] else
                                   " added by hand: its records are kept; its support counts once earned"))
    return "; ".join(parts)


def cmd_trust_list(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        out = memory.trusted()
    if args.json:
        print(json.dumps(out))
        return 0
    policy, origins = out["policy"], out["origins"]
    if policy == "any":
        print('trust = "any": every origin counts as support here (the daemon warns about it)')
    if not origins:
        print(f"nobody named or trusted yet (policy {policy}): neverestctl trust add ORIGIN names a memory")
    hidden = 0
    for e in origins:
        if e["reasons"][0] == CORROBORATES:
            hidden += 1
            if hidden > SHOWN_CORROBORATING:
                continue
        status = "counts" if e["counts"] else "corroborates" if e["corroborates"] else "room only"
        print(f"{e['origin']}  {status:<12}  {_why(e, out['support_n'])}")
    if hidden > SHOWN_CORROBORATING:
        print(f"... and {hidden - SHOWN_CORROBORATING} more corroborating origin(s) (--json lists them all)")
    return 0


def add_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser | None = None  # type: ignore[type-arg]
                ) -> None:
    parents = [common] if common else []
    p = sub.add_parser("trust", parents=parents, help="the memories whose support counts here, and why")
    trust_sub = p.add_subparsers(dest="trust_command", required=True, metavar="ACTION")
    q = trust_sub.add_parser("add", parents=parents,
                             help="name a memory by its origin: its support counts here under every policy")
    q.add_argument("origin", metavar="ORIGIN", help="16 hex digits, as `neverestctl id` prints them")
    q.add_argument("--note", metavar="TEXT", help="why, or who it is (shown by trust list)")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_trust_add)
    q = trust_sub.add_parser("remove", parents=parents, help="stop naming a memory")
    q.add_argument("origin", metavar="ORIGIN")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_trust_remove)
    q = trust_sub.add_parser("list", parents=parents,
                             help="who is trusted here and why: named, earned, from a trusted memory, "
                                  "corroborating, peers added by hand")
    q.add_argument("--json", action="store_true", help="one JSON object: the policy and every origin")
    q.set_defaults(func=cmd_trust_list)
