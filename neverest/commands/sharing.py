"""neverestctl commands of sharing: publish, unpublish, folder sync, show, revoke, commons."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from neverest.commands.common import CommandFailed, UsageError, daemon_or_here, open_memory
from neverest.memory import views
from neverest.memory.service import Memory, OwnerError
from neverest.transports import commons_client
from neverest.transports.adapters import CommonsTransport, FolderTransport

T = TypeVar("T")


def cmd_publish(args: argparse.Namespace) -> int:
    project = Path(args.project).expanduser()
    if not project.is_dir():
        raise UsageError(f"{args.project} is not a folder: give the project folder whose lessons may be shared")
    project_path = str(project.resolve())
    out, by_daemon = daemon_or_here(args, {"op": "publish", "project": project_path, "corrections": args.corrections},
                                    lambda memory: _owner(lambda: memory.publish(project_path,
                                                                                 corrections=args.corrections)))
    if args.json:
        print(json.dumps(out))
    else:
        what = "lessons, corrections included" if args.corrections else "lessons (corrections stay private)"
        print(f"publishing {what} from {out['project']}; {out['signed']} record(s) signed now"
              + ("; the daemon shares them with its peers now" if by_daemon and out["signed"] else ""))
        if out.get("held_back"):
            print(f"{out['held_back']} lesson(s) held back: their text still holds a path, an address, a token... "
                  "or says nothing once scrubbed; they stay personal (neverestctl show HASH says why)")
    return 0


def cmd_unpublish(args: argparse.Namespace) -> int:
    project_path = str(Path(args.project).expanduser().resolve())
    out, _ = daemon_or_here(args, {"op": "unpublish", "project": project_path},
                            lambda memory: memory.unpublish(project_path))
    if args.json:
        print(json.dumps(out))
    else:
        print(f"no longer publishing {args.project}" if out["removed"] else f"{args.project} was not published")
    return 0


def cmd_folder_sync(args: argparse.Namespace) -> int:
    folder_path = str(Path(args.dir).expanduser().resolve())
    out, _ = daemon_or_here(args, {"op": "folder_sync", "dir": folder_path},
                            lambda memory: memory.sync(FolderTransport(Path(folder_path))))
    if "error" in out:
        raise CommandFailed(out["error"])
    if args.json:
        print(json.dumps(out))
    else:
        total = out["total"]
        print(f"wrote {out['written']} record(s); read {len(out['files'])} file(s): {total['accepted']} new, "
              f"{total['duplicates']} already held, {sum(total['refused'].values())} refused")
        for reason, n in sorted(total["refused"].items()):
            print(f"  refused {n} x {reason}")
    return 0


def _owner(fn: Callable[[], T]) -> T:
    """Run an owner's write here; what the owner got wrong is a usage error."""
    try:
        return fn()
    except OwnerError as exc:
        raise UsageError(str(exc)) from None


def _find(memory: Memory, prefix: str) -> str:
    try:
        return views.find(memory.store.db, prefix)
    except views.LessonNotFound as exc:
        raise UsageError(str(exc)) from None


def cmd_show(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        out = memory.lesson(_find(memory, args.hash))
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
        return 0
    print(f"{out['hash']}  [{out['kind']}]  {out['text']}")
    tomb = out["tombstone"]
    print(f"state {out['state']}, support {out['support']}" + (f", tombstone ({tomb})" if tomb else ""))
    print(f"publishers: {', '.join(out['publishers']) or 'none'} (first: {out['first_publisher'] or '-'})")
    print(f"supporters: {', '.join(out['supporters']) or 'none'}")
    if out["revoked_by"]:
        print(f"revoked by: {', '.join(out['revoked_by'])}")
    if out["refuted_by"]:
        print(f"refuted by: {', '.join(out['refuted_by'])} (informs trust; changes no state)")
    if out["held_back"]:
        print(f"held back: not published, {out['held_back']}; it stays personal")
    for held in out["held_here"]:
        print(f"held here: strength {held['strength']}, seen {held['seen']}, layer {held['layer']}, "
              f"from {held['origin']}" + (" (archived)" if held["archived"] else ""))
    for rec in out["records"]:
        print(f"  {rec['type']:<8} by {rec['origin']} seq {rec['seq']} signed {rec['at']} via {rec['source']}"
              + (" (superseded)" if rec["superseded"] else ""))
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    with open_memory(args) as memory:
        target = _find(memory, args.hash)
    out, _ = daemon_or_here(args, {"op": "revoke", "hash": target},
                            lambda memory: {"hash": target, "seq": _owner(lambda: memory.revoke(target)).seq})
    if args.json:
        print(json.dumps(out))
    else:
        print(f"revoked {target} (seq {out['seq']})")
    return 0


def cmd_commons(args: argparse.Namespace) -> int:
    token_file = args.token_file
    if not token_file:
        with open_memory(args) as memory:
            token_file = memory.config.commons_token_file
    if not token_file:
        raise UsageError("give --token-file FILE (or set commons_token_file in config.toml)")
    token_path = str(Path(token_file).expanduser().resolve())
    def here(memory: Memory) -> dict[str, Any]:
        try:
            token = commons_client.read_token(token_path)
        except commons_client.CommonsError as exc:
            raise UsageError(str(exc)) from None
        return memory.sync(CommonsTransport(args.url, token, push=args.commons_command == "push",
                                            pull=args.commons_command == "pull"))
    out, _ = daemon_or_here(args, {"op": "commons", "action": args.commons_command, "url": args.url,
                                   "token_file": token_path}, here)
    if "error" in out:
        raise CommandFailed(out["error"])
    if args.json:
        print(json.dumps(out[args.commons_command]))
    elif args.commons_command == "push":
        pushed = out["push"]
        print(f"pushed {pushed['records']} record(s), {pushed['bytes']} bytes" +
              (f"; note: {pushed['conflict']}" if pushed["conflict"] else "") +
              (f"; {pushed['refutations_left_out']} refutation(s) left out: the commons predates them"
               if pushed.get("refutations_left_out") else ""))
    else:
        pulled = out["pull"]
        total = pulled["total"]
        print(f"{pulled['index_requests']} index request(s), {pulled['file_requests']} file request(s): "
              f"{total['accepted']} new record(s), {total['duplicates']} already held, "
              f"{sum(total['refused'].values())} refused")
    return 0
