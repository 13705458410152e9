"""neverestctl: the command line of a Neverest memory.

Every command is reachable in-process as ``main([...])`` (that is how the tests
drive it) and returns the process exit status: 0 success, 1 the command ran and
found a problem (a refused record...), 2 a usage error.  Each command has a
readable default output and ``--json`` for scripts where it prints data.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from neverest import __version__
from neverest.clock import clock_from_env
from neverest.config import ConfigError, load_config
from neverest.control import ControlError, ask
from neverest.identity import IdentityError, load_or_create
from neverest.lines import read_lines
from neverest.memory import holdings, publish
from neverest.memory.events import EVENT_KINDS, ingest, ingest_lines
from neverest.memory.inbox import drain_inbox
from neverest.memory.render import lesson_rows
from neverest.memory.service import Memory
from neverest.memory.states import commons_pass, verdict
from neverest.memory.store import StoreError
from neverest.paths import resolve_home
from neverest.peers import table as peer_table
from neverest.records import KINDS, MAX_RECORD_BYTES, RecordError, claimed, parse_many
from neverest.transports import commons_client, folder


class UsageError(Exception):
    """The user asked for something that cannot be done as asked (exit status 2)."""


def _cmd_id(args: argparse.Namespace) -> int:
    ident = load_or_create(resolve_home(args.home))
    if args.json:
        print(json.dumps({"origin": ident.origin, "key": ident.key, "key_file": str(ident.path)}))
    else:
        print(f"origin {ident.origin}\nkey    {ident.key}\nfile   {ident.path}")
    return 0


def verify_stream(stream: BinaryIO, out: TextIO) -> bool:
    """Check every line of ``stream``, writing one JSON verdict per non-blank line.

    This is the stable contract of ``neverestctl verify``: the keys line, ok, type,
    hash, origin, reason (a refusal code or null) and message (null when ok).
    Returns True when every line was accepted.
    """
    all_ok = True
    lines = (((number, line), line) for number, line in read_lines(stream, MAX_RECORD_BYTES)
             if line is None or line.strip())
    for (number, line), result in parse_many(lines):
        verdict: dict[str, object]
        if isinstance(result, RecordError):
            all_ok = False
            rtype, target, origin = claimed(line) if line is not None else (None, None, None)
            verdict = {"line": number, "ok": False, "type": rtype, "hash": target, "origin": origin,
                       "reason": result.code, "message": result.message}
        else:
            verdict = {"line": number, "ok": True, "type": result.type, "hash": result.target,
                       "origin": result.origin, "reason": None, "message": None}
        out.write(json.dumps(verdict, ensure_ascii=False) + "\n")
    return all_ok


def _open_inputs(files: Sequence[str]) -> Iterable[BinaryIO]:
    if not files:
        yield sys.stdin.buffer
        return
    for name in files:
        if name == "-":
            yield sys.stdin.buffer
            continue
        try:
            handle = open(name, "rb")
        except OSError as exc:
            raise UsageError(f"cannot read {name}: {exc.strerror}") from None
        with handle:
            yield handle


def _cmd_verify(args: argparse.Namespace) -> int:
    # Check that every file can be opened before printing anything, so that a
    # typo in the third name is a usage error, not a half-written report.
    for name in args.files:
        if name != "-" and not Path(name).is_file():
            raise UsageError(f"cannot read {name}: no such file")
    all_ok = True
    for stream in _open_inputs(args.files):
        all_ok &= verify_stream(stream, sys.stdout)
    return 0 if all_ok else 1


def _memory(args: argparse.Namespace) -> Memory:
    home = resolve_home(args.home)
    try:
        clock = clock_from_env()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return Memory(home, load_config(home), clock)


_EVENT_FIELDS = ("said", "agent_did", "title", "expected", "happened", "text", "agent", "session", "cwd", "at")


def _cmd_remember(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
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
            event = {"kind": args.kind} | {f: getattr(args, f) for f in _EVENT_FIELDS if getattr(args, f) is not None}
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


def _cmd_sleep(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
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


def _state_of(memory: Memory, row: dict[str, object], origin: str) -> tuple[str, int]:
    """A lesson's state: archived, local (never published) or its commons state, and its support."""
    held = holdings.about(memory.store.db, str(row["hash"]))
    if row["archived"] and row["origin"] == "":
        return "archived", 0
    if not held:
        return "local", 0
    v = verdict(memory.store.db, str(row["hash"]), now=memory.clock.now(), config=memory.config, own_origin=origin)
    return v.state, v.support


def _cmd_lessons(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        origin = memory.identity.origin
        rows = lesson_rows(memory.store, kind=args.kind, include_archived=args.all)
        for row in rows:
            state, support = _state_of(memory, row, origin)
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


def _cmd_recall(args: argparse.Namespace) -> int:
    if args.k < 1:
        raise UsageError("-k must be at least 1")
    with _memory(args) as memory:
        hits = memory.recall(args.query, k=args.k)
    for hit in hits:
        if args.json:
            print(json.dumps(hit.to_json(), ensure_ascii=False))
        else:
            print(f"{hit.score:.3f}  {hit.type:<7} {hit.kind:<11} {hit.text}")
    return 0


def _cmd_publish(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        now = memory.clock.now()
        project = publish.opt_in(memory.store, args.project, corrections=args.corrections, now=now)
        signed = publish.publish(memory.store, memory.identity, now)
    if args.json:
        print(json.dumps({"project": project, "corrections": args.corrections, "signed": len(signed)}))
    else:
        what = "lessons, corrections included" if args.corrections else "lessons (corrections stay private)"
        print(f"publishing {what} from {project}; {len(signed)} record(s) signed now")
    return 0


def _cmd_unpublish(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        removed = publish.opt_out(memory.store, args.project)
    print(f"no longer publishing {args.project}" if removed else f"{args.project} was not published")
    return 0


def _cmd_folder_sync(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        now = memory.clock.now()
        publish.publish(memory.store, memory.identity, now)
        result = folder.sync(memory.store, memory.identity, Path(args.dir), memory.config, now)
        commons_pass(memory.store, now=now, config=memory.config, own_origin=memory.identity.origin)
        memory.render()
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        total = result.total()
        print(f"wrote {result.written} record(s); read {len(result.files)} file(s): {total.accepted} new, "
              f"{total.duplicates} already held, {sum(total.refused.values())} refused")
        for reason, n in sorted(total.refused.items()):
            print(f"  refused {n} x {reason}")
    return 0


def _find(memory: Memory, prefix: str) -> str:
    prefix = prefix.lower()
    if len(prefix) < 6:
        raise UsageError("give at least 6 hex digits of the lesson's hash")
    found = {str(r[0]) for r in memory.store.db.execute(
        "SELECT hash FROM lessons WHERE hash LIKE ? UNION SELECT target FROM records WHERE target LIKE ?",
        (prefix + "%", prefix + "%"))}
    if len(found) != 1:
        raise UsageError(f"{len(found)} lessons have a hash starting with {prefix}")
    return found.pop()


def _cmd_show(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        target = _find(memory, args.hash)
        db = memory.store.db
        origin = memory.identity.origin
        v = verdict(db, target, now=memory.clock.now(), config=memory.config, own_origin=origin)
        lessons = [r for r in lesson_rows(memory.store, include_archived=True) if r["hash"] == target]
        records = [{"type": h.type, "origin": h.origin, "seq": h.seq, "at": h.at, "source": h.source,
                    "received": h.received, "superseded": h.superseded} for h in holdings.about(db, target)]
        tomb = holdings.tombstone(db, target)
    first = lessons[0] if lessons else {}
    out: dict[str, Any] = {
        "hash": target, "text": first.get("text"), "kind": first.get("kind"),
        "state": v.state, "support": v.support, "publishers": list(v.publishers), "first_publisher": v.first_publisher,
        "supporters": list(v.supporters), "revoked_by": list(v.revoked_by), "tombstone": tomb,
        "last_support": v.last_support.isoformat() if v.last_support else None,
        "held_here": [{"id": r["id"], "origin": r["origin"] or origin, "strength": r["strength"], "seen": r["seen"],
                       "layer": r["layer"], "archived": r["archived"], "sources": r["sources"]} for r in lessons],
        "records": records,
    }
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
        return 0
    print(f"{target}  [{out['kind']}]  {out['text']}")
    print(f"state {v.state}, support {v.support}" + (f", tombstone ({tomb})" if tomb else ""))
    print(f"publishers: {', '.join(v.publishers) or 'none'} (first: {v.first_publisher or '-'})")
    print(f"supporters: {', '.join(v.supporters) or 'none'}")
    if v.revoked_by:
        print(f"revoked by: {', '.join(v.revoked_by)}")
    for held in out["held_here"]:
        print(f"held here: strength {held['strength']}, seen {held['seen']}, layer {held['layer']}, "
              f"from {held['origin']}" + (" (archived)" if held["archived"] else ""))
    for rec in records:
        print(f"  {rec['type']:<8} by {rec['origin']} seq {rec['seq']} signed {rec['at']} via {rec['source']}"
              + (" (superseded)" if rec["superseded"] else ""))
    return 0


def _cmd_revoke(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        target = _find(memory, args.hash)
        mine = memory.store.db.execute(
            "SELECT 1 FROM lessons WHERE hash = ? AND origin = '' UNION "
            "SELECT 1 FROM records WHERE target = ? AND origin = ? AND type = 'lesson'",
            (target, target, memory.identity.origin)).fetchone()
        if mine is None:
            raise UsageError(f"{target} is not a lesson of this memory; only its origin can revoke it")
        now = memory.clock.now()
        record = publish.revoke(memory.store, memory.identity, target, now)
        commons_pass(memory.store, now=now, config=memory.config, own_origin=memory.identity.origin)
        memory.render()
    print(f"revoked {target} (seq {record.seq})")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    home = resolve_home(args.home)
    try:  # what only the daemon knows (uptime, last sleep...), when one runs
        daemon: dict[str, Any] | None = ask(home, {"op": "status"}, timeout_s=10.0)["status"]
    except ControlError:
        daemon = None
    with _memory(args) as memory:
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


def _cmd_peer_add(args: argparse.Namespace) -> int:
    with _memory(args) as memory, memory.store.write() as db:
        try:
            url = peer_table.add(db, args.url, source="manual", now=memory.clock.now())
        except peer_table.PeerError as exc:
            raise UsageError(str(exc)) from None
    print(f"added {url}; its origin is learned at the first exchange")
    return 0


def _cmd_peer_remove(args: argparse.Namespace) -> int:
    with _memory(args) as memory, memory.store.write() as db:
        gone = peer_table.remove(db, args.peer)
    if not gone:
        print(f"neverestctl: no peer or address {args.peer}", file=sys.stderr)
        return 1
    print(f"removed {args.peer}")
    return 0


def _cmd_peer_list(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
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


def _cmd_gossip(args: argparse.Namespace) -> int:
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
    with _memory(args) as memory:
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


def _cmd_commons(args: argparse.Namespace) -> int:
    with _memory(args) as memory:
        token_file = args.token_file or memory.config.commons_token_file
        if not token_file:
            raise UsageError("give --token-file FILE (or set commons_token_file in config.toml)")
        try:
            token = commons_client.read_token(token_file)
            if args.commons_command == "push":
                publish.publish(memory.store, memory.identity, memory.clock.now())
                out = commons_client.push(memory.store, memory.identity, args.url, token)
            else:
                now = memory.clock.now()
                out = commons_client.pull(memory.store, memory.identity, args.url, token, memory.config,
                                          now).to_json()
                commons_pass(memory.store, now=now, config=memory.config, own_origin=memory.identity.origin)
                memory.render()
        except commons_client.CommonsError as exc:
            print(f"neverestctl: {exc}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(out))
    elif args.commons_command == "push":
        print(f"pushed {out['records']} record(s), {out['bytes']} bytes" +
              (f"; note: {out['conflict']}" if out["conflict"] else ""))
    else:
        total = out["total"]
        print(f"{out['index_requests']} index request(s), {out['file_requests']} file request(s): "
              f"{total['accepted']} new record(s), {total['duplicates']} already held, "
              f"{sum(total['refused'].values())} refused")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="neverestctl", description="Manage a Neverest memory.")
    parser.add_argument("--version", action="version", version=f"neverest {__version__}")
    parser.add_argument("--home", help="the memory's home folder (default: $NEVEREST_HOME, else ~/.neverest)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("id", help="print this memory's origin and public key (made on first use)")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.set_defaults(func=_cmd_id)

    p = sub.add_parser(
        "verify",
        help="check record lines; one JSON verdict per non-blank line",
        description="Check wire records (one per line) from FILEs or standard input. Prints one JSON "
        "object per non-blank line: line, ok, type, hash, origin, reason, message. Exit status 0 when "
        "every line is accepted, 1 when any is refused, 2 for a usage error.",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="files of records ('-' or none: standard input)")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("remember", help="store an agent's event (or JSON Lines of events) as an episode",
                       description="Store one event from flags, or many from --events FILE|- (JSON Lines). "
                       "Exit status 1 when any event is refused; the others are still stored.")
    p.add_argument("--kind", choices=EVENT_KINDS)
    for name in _EVENT_FIELDS:
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, metavar=name.upper())
    p.add_argument("--events", metavar="FILE", help="JSON Lines of events ('-': standard input)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_remember)

    p = sub.add_parser("sleep", help="drain the inbox and run the sleep passes now; print what each did")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_sleep)

    p = sub.add_parser("lessons", help="list the lessons this memory holds")
    p.add_argument("--kind", choices=KINDS)
    p.add_argument("--all", action="store_true", help="include archived lessons")
    p.add_argument("--json", action="store_true", help="one JSON object per lesson")
    p.set_defaults(func=_cmd_lessons)

    p = sub.add_parser("recall", help="the episodes and lessons a query bears on")
    p.add_argument("query")
    p.add_argument("-k", type=int, default=5, help="how many (default 5)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_recall)

    p = sub.add_parser("publish", help="share the lessons learned in a project (opt-in, per project)")
    p.add_argument("--project", required=True, help="the project folder whose lessons may leave this machine")
    p.add_argument("--corrections", action="store_true", help="also publish lessons about the person")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_publish)

    p = sub.add_parser("unpublish", help="stop sharing a project's lessons")
    p.add_argument("--project", required=True)
    p.set_defaults(func=_cmd_unpublish)

    p = sub.add_parser("folder", help="the shared-folder transport")
    folder_sub = p.add_subparsers(dest="folder_command", required=True, metavar="ACTION")
    q = folder_sub.add_parser("sync", help="write this memory's records to DIR and read everyone else's")
    q.add_argument("dir", metavar="DIR")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=_cmd_folder_sync)

    p = sub.add_parser("commons", help="the HTTP commons transport")
    commons_sub = p.add_subparsers(dest="commons_command", required=True, metavar="ACTION")
    for action, text in (("push", "put this memory's signed records on the commons"),
                         ("pull", "read what changed on the commons through the receive function")):
        q = commons_sub.add_parser(action, help=text)
        q.add_argument("url", metavar="URL", help="the commons, like https://commons.example.org")
        q.add_argument("--token-file", metavar="FILE", help="a file holding the bearer token")
        q.add_argument("--json", action="store_true")
        q.set_defaults(func=_cmd_commons)

    p = sub.add_parser("show", help="a lesson with its state, publishers, supporters and records")
    p.add_argument("hash", metavar="HASH", help="the lesson's hash (at least 6 hex digits)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("revoke", help="withdraw a lesson this memory published")
    p.add_argument("hash", metavar="HASH")
    p.set_defaults(func=_cmd_revoke)

    p = sub.add_parser("peer", help="the peers this memory gossips with")
    peer_sub = p.add_subparsers(dest="peer_command", required=True, metavar="ACTION")
    q = peer_sub.add_parser("add", help="add a peer by URL, like http://192.0.2.7:7428")
    q.add_argument("url", metavar="URL")
    q.set_defaults(func=_cmd_peer_add)
    q = peer_sub.add_parser("remove", help="forget an address, or a peer (by origin) and all its addresses")
    q.add_argument("peer", metavar="URL|ORIGIN")
    q.set_defaults(func=_cmd_peer_remove)
    q = peer_sub.add_parser("list", help="the peers, their addresses, scores and back-offs")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=_cmd_peer_list)

    p = sub.add_parser("gossip", help="one gossip round now (through the daemon when it runs)")
    p.add_argument("--peer", metavar="URL", help="exchange with this address only")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_gossip)

    p = sub.add_parser("status", help="this memory at a glance, with refusals by reason and source")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_status)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"neverestctl: {exc}", file=sys.stderr)
        return 2
    except (IdentityError, StoreError, ConfigError) as exc:
        print(f"neverestctl: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
