"""neverestctl commands of sharing: publish, unpublish, folder sync, show, revoke, commons."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from neverest.commands.common import UsageError, open_memory
from neverest.memory import holdings, publish
from neverest.memory.render import lesson_rows
from neverest.memory.service import Memory
from neverest.memory.states import commons_pass, verdict
from neverest.transports import commons_client, folder


def cmd_publish(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        now = memory.clock.now()
        project = publish.opt_in(memory.store, args.project, corrections=args.corrections, now=now)
        signed = publish.publish(memory.store, memory.identity, now)
    if args.json:
        print(json.dumps({"project": project, "corrections": args.corrections, "signed": len(signed)}))
    else:
        what = "lessons, corrections included" if args.corrections else "lessons (corrections stay private)"
        print(f"publishing {what} from {project}; {len(signed)} record(s) signed now")
    return 0


def cmd_unpublish(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        removed = publish.opt_out(memory.store, args.project)
    print(f"no longer publishing {args.project}" if removed else f"{args.project} was not published")
    return 0


def cmd_folder_sync(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
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


def cmd_show(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        target = _find(memory, args.hash)
        db = memory.store.db
        origin = memory.identity.origin
        held = holdings.about(db, target)
        v = verdict(db, target, now=memory.clock.now(), config=memory.config, own_origin=origin, held=held)
        lessons = lesson_rows(memory.store, include_archived=True, target=target)
        records = [{"type": h.type, "origin": h.origin, "seq": h.seq, "at": h.at, "source": h.source,
                    "received": h.received, "superseded": h.superseded} for h in held]
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


def cmd_revoke(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
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


def cmd_commons(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
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


