"""neverestctl commands of the local memory: remember, sleep, lessons, recall."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from neverest.commands.common import UsageError, open_memory
from neverest.memory import holdings
from neverest.memory.events import ingest, ingest_lines
from neverest.memory.inbox import drain_inbox
from neverest.memory.render import lesson_rows
from neverest.memory.service import Memory
from neverest.memory.states import trust_filter, verdict

EVENT_FIELDS = ("said", "agent_did", "title", "expected", "happened", "text", "agent", "session", "cwd", "at")


def cmd_remember(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        now = memory.clock.now()
        if args.events is not None:
            if args.kind is not None:
                raise UsageError("give either --events or an event's fields, not both")
            if args.events == "-":
                result = ingest_lines(memory.store, sys.stdin.buffer, now=now)
            else:
                try:
                    with open(args.events, "rb") as stream:
                        result = ingest_lines(memory.store, stream, now=now)
                except OSError as exc:
                    raise UsageError(f"cannot read {args.events}: {exc.strerror}") from None
        else:
            if args.kind is None:
                raise UsageError("give --kind and the event's fields, or --events FILE|-")
            event = {"kind": args.kind} | {f: getattr(args, f) for f in EVENT_FIELDS if getattr(args, f) is not None}
            if "cwd" not in event:
                event["cwd"] = str(Path.cwd())
            result = ingest(memory.store, [event], now=now)
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        print(f"stored {result.stored}, already known {result.duplicates}, refused {len(result.refused)}")
        for where, reason in result.refused:
            print(f"  refused {where}: {reason}", file=sys.stderr)
    return 1 if result.refused else 0


def cmd_sleep(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        inbox = drain_inbox(memory.store, memory.home, now=memory.clock.now())
        report = memory.sleep()
    if args.json:
        print(json.dumps(report.to_json() | {"inbox": inbox.to_json()}, ensure_ascii=False))
        return 0
    print(f"sleep at {report.started} in space {report.space}")
    print(f"  inbox      {inbox.stored} new event(s), {len(inbox.refused)} refused")
    print(f"  embed      {report.embedded} vector(s)")
    print(f"  decay      {report.decay_days} day(s); archived {report.archived_episodes} episode(s), "
          f"{report.archived_lessons} lesson(s)")
    print(f"  lessons    {report.considered} episode(s) considered: {len(report.learned)} new lesson(s), "
          f"{report.joined} joined, {report.waiting} waiting for a repeat")
    for item in report.learned:
        print(f"               + [{item['kind']}] {item['text']}")
    print(f"  merge      {len(report.merged)} lesson(s) merged into themes")
    print(f"  verify     {len(report.confirmed)} prediction(s) confirmed, {len(report.failed)} failed")
    print(f"  predict    {report.predicted} new prediction(s)")
    return 0


def _state_of(memory: Memory, row: dict[str, object], origin: str, counts: Callable[[str], bool]) -> tuple[str, int]:
    """A lesson's state: archived, local (never published) or its commons state, and its support."""
    if row["archived"] and row["origin"] == "":
        return "archived", 0
    held = holdings.about(memory.store.db, str(row["hash"]))
    if not held:
        return "local", 0
    v = verdict(memory.store.db, str(row["hash"]), now=memory.clock.now(), config=memory.config, own_origin=origin,
                counts=counts, held=held)
    return v.state, v.support


def cmd_lessons(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        origin = memory.identity.origin
        rows = lesson_rows(memory.store, kind=args.kind, include_archived=args.all)
        counts = trust_filter(memory.store.db, memory.config, origin)
        for row in rows:
            state, support = _state_of(memory, row, origin, counts)
            if args.json:
                print(json.dumps({
                    "hash": row["hash"], "kind": row["kind"], "text": row["text"], "strength": row["strength"],
                    "seen": row["seen"], "state": state, "support": support, "origin": row["origin"] or origin,
                    "updated": row["updated"], "id": row["id"], "sources": row["sources"], "layer": row["layer"],
                }, ensure_ascii=False))
            else:
                print(f"{row['hash'][:8]}  {row['kind']:<10} {row['strength']:5.2f}  seen {row['seen']:<3} "
                      f"{state:<9} {support:>2}  {row['text']}")
    return 0


def cmd_recall(args: argparse.Namespace) -> int:
    if args.k < 1:
        raise UsageError("-k must be at least 1")
    with open_memory(args) as memory:
        hits = memory.recall(args.query, k=args.k)
    for hit in hits:
        if args.json:
            print(json.dumps(hit.to_json(), ensure_ascii=False))
        else:
            print(f"{hit.score:.3f}  {hit.type:<7} {hit.kind:<11} {hit.text}")
    return 0


