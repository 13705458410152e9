"""The daemon's control operations: what ``neverestctl`` and local agents ask over the Unix socket.

Every writing command of ``neverestctl`` comes here when a daemon runs, so that its
change is made by the one writer of this home and shared at once (a gossip round is
started after anything that changes what this memory publishes).  Each op calls the
memory service; none re-spells a sequence.  A request's own mistakes raise
``BadRequest`` (answered as the client's fault, see ``neverest/control.py``); anything else is the
daemon's fault.

    {"op": "ping"}
    {"op": "status"}
    {"op": "lessons", "kind": KIND|null, "all": bool}    the rows of `neverestctl lessons --json`
    {"op": "recall", "query": TEXT, "k": N}              the hits of `neverestctl recall --json`
    {"op": "remember", "events": [...]}   or   {"op": "remember", "path": "/abs/events.jsonl"}
    {"op": "sleep"}                              the night now, then a round
    {"op": "gossip", "peer": URL|null}
    {"op": "publish", "project": PATH, "corrections": bool}
    {"op": "unpublish", "project": PATH}
    {"op": "revoke", "hash": HASH}               a full 32-hex hash
    {"op": "folder_sync", "dir": PATH}
    {"op": "commons", "action": "push"|"pull", "url": URL, "token_file": PATH}
    {"op": "forget", "episode": ID} | {"op": "forget", "session": S} | {"op": "forget", "before": ISO-TIME}
                                                 | {"op": "forget", "relay": PROJECT} (its project log)
    {"op": "trust", "action": "add", "origin": ORIGIN, "note": TEXT|null} | {"op": "trust", "action": "remove", ...}
"""

from __future__ import annotations

import importlib
import logging
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import trio

from neverest.clock import parse_time
from neverest.control import BadRequest
from neverest.control import serve as serve_socket
from neverest.peers import table as peer_table
from neverest.records import KINDS
from neverest.services.gossip import GossipService
from neverest.services.nightly import night
from neverest.services.state import DaemonState
from neverest.services.status import daemon_status

if TYPE_CHECKING:
    # The memory service is imported by the memory worker's first job, the transports by the op that
    # names one: an idle daemon holds neither (docs/figures.md).
    from neverest.memory.service import Memory

log = logging.getLogger("neverestd.control")
MAX_EVENTS: Final = 10_000
_HASH = re.compile(r"[0-9a-f]{32}")


def _str(request: dict[str, Any], name: str) -> str:
    value = request.get(name)
    if not isinstance(value, str) or not value or len(value) > 4096:
        raise BadRequest(f'"{name}" must be a non-empty string')
    return value


class ControlOps:
    def __init__(self, state: DaemonState, gossip: GossipService, nursery: trio.Nursery) -> None:
        self.state, self.gossip, self.nursery = state, gossip, nursery

    def _share_now(self) -> None:
        """What this memory publishes changed: tell the peers now, not at the next scheduled round."""
        self.nursery.start_soon(self.gossip.round_quietly)

    async def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        handler = getattr(self, f"op_{op}", None) if re.fullmatch(r"[a-z_]{1,32}", op) else None
        if handler is None:
            raise BadRequest(f"unknown op {op!r}")
        try:
            result: dict[str, Any] = await handler(request)
        except peer_table.PeerError as exc:  # what the owner asked cannot be done as asked
            raise BadRequest(str(exc)) from None
        except Exception as exc:
            # An OwnerError is raised by a memory-service job, so its module is loaded by then; while it is
            # not, nothing raised can be one (and a bad request does not load it).
            service = sys.modules.get("neverest.memory.service")
            if service is not None and isinstance(exc, service.OwnerError):  # cannot be done as asked
                raise BadRequest(str(exc)) from None
            raise
        return result

    async def op_ping(self, request: dict[str, Any]) -> dict[str, Any]:
        return {}

    async def op_status(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"status": await daemon_status(self.state)}

    # The read commands an agent runs often: answered here, the CLI process loads no memory of its own.
    async def op_lessons(self, request: dict[str, Any]) -> dict[str, Any]:
        kind = request.get("kind")
        if kind is not None and kind not in KINDS:
            raise BadRequest(f'"kind" must be one of {", ".join(KINDS)} or null')
        include_archived = bool(request.get("all", False))
        rows = await self.state.worker.read(
            lambda memory: [lesson.listed() for lesson in memory.lessons(kind=kind, include_archived=include_archived)])
        return {"result": rows}

    async def op_recall(self, request: dict[str, Any]) -> dict[str, Any]:
        query, k = request.get("query"), request.get("k", 5)
        if not isinstance(query, str):  # any text the CLI takes, an empty one too: the same answer as without us
            raise BadRequest('"query" must be a string')
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise BadRequest('"k" must be an integer of at least 1')
        # A write: recall touches the episodes it returns (their decay starts again).
        hits = await self.state.worker.write(lambda memory: [hit.to_json() for hit in memory.recall(query, k=k)])
        return {"result": hits}

    async def op_remember(self, request: dict[str, Any]) -> dict[str, Any]:
        if "path" in request:
            path = Path(_str(request, "path"))
            if not path.is_absolute():
                raise BadRequest('"path" must be absolute (the daemon does not share the client\'s directory)')

            def from_file(memory: Memory) -> dict[str, Any]:
                try:
                    with path.open("rb") as stream:
                        return memory.ingest_lines(stream).to_json()
                except OSError as exc:
                    raise BadRequest(f"cannot read {path}: {exc.strerror}") from None
            return {"result": await self.state.worker.write(from_file)}
        events = request.get("events")
        if not isinstance(events, list) or len(events) > MAX_EVENTS:
            raise BadRequest(f'"events" must be a list of at most {MAX_EVENTS} events')
        return {"result": await self.state.worker.write(lambda memory: memory.ingest(events).to_json())}

    async def op_sleep(self, request: dict[str, Any]) -> dict[str, Any]:
        report = await night(self.state)
        return {"report": report, "round": await self.gossip.round()}

    async def op_gossip(self, request: dict[str, Any]) -> dict[str, Any]:
        peer = request.get("peer")
        if peer is not None and not isinstance(peer, str):
            raise BadRequest('"peer" must be a URL')
        return {"round": await self.gossip.round(only=peer)}

    async def op_publish(self, request: dict[str, Any]) -> dict[str, Any]:
        project, corrections = _str(request, "project"), bool(request.get("corrections", False))
        out = await self.state.worker.write(lambda memory: memory.publish(project, corrections=corrections))
        self._share_now()
        return {"result": out}

    async def op_unpublish(self, request: dict[str, Any]) -> dict[str, Any]:
        project = _str(request, "project")
        return {"result": await self.state.worker.write(lambda memory: memory.unpublish(project))}

    async def op_revoke(self, request: dict[str, Any]) -> dict[str, Any]:
        target = _str(request, "hash")
        if not _HASH.fullmatch(target):
            raise BadRequest('"hash" must be a full lesson hash (32 hex digits)')
        record = await self.state.worker.write(lambda memory: memory.revoke(target))
        self._share_now()
        return {"result": {"hash": target, "seq": record.seq}}

    async def op_forget(self, request: dict[str, Any]) -> dict[str, Any]:
        chosen = {name: request[name] for name in ("episode", "session", "before", "relay")
                  if request.get(name) is not None}
        if len(chosen) != 1 or not all(isinstance(v, str) and 0 < len(v) <= 4096 for v in chosen.values()):
            raise BadRequest('forget takes exactly one of "episode", "session", "before", "relay" (strings)')
        try:
            before = parse_time(str(chosen["before"])) if "before" in chosen else None
        except ValueError:
            raise BadRequest('"before" must be an ISO 8601 time') from None
        episode, session, project = chosen.get("episode"), chosen.get("session"), chosen.get("relay")
        from neverest import relay  # the project logs' module: not held by a daemon that is not asked to forget

        try:
            result = await self.state.worker.write(
                lambda memory: memory.forget(episode=episode, session=session, before=before, relay_project=project))
        except relay.RelayError as exc:
            raise BadRequest(str(exc)) from None
        return {"result": result}

    async def op_trust(self, request: dict[str, Any]) -> dict[str, Any]:
        """Name an origin, or stop naming it: the daemon's next verdicts (this one's included) count it."""
        action, origin, note = request.get("action"), _str(request, "origin"), request.get("note")
        if action not in ("add", "remove"):
            raise BadRequest('"action" must be "add" or "remove"')
        if note is not None and (not isinstance(note, str) or len(note) > 4096):
            raise BadRequest('"note" must be a string of at most 4096 characters')
        if action == "add":
            return {"result": await self.state.worker.write(lambda memory: memory.name(origin, note=note))}
        return {"result": await self.state.worker.write(lambda memory: memory.unname(origin))}

    async def op_folder_sync(self, request: dict[str, Any]) -> dict[str, Any]:
        from neverest.transports.adapters import FolderTransport

        transport = FolderTransport(Path(_str(request, "dir")))
        out = await self.state.worker.write(lambda memory: memory.sync(transport))
        self._share_now()
        return {"result": out}

    async def op_commons(self, request: dict[str, Any]) -> dict[str, Any]:
        action = request.get("action")
        if action not in ("push", "pull"):
            raise BadRequest('"action" must be "push" or "pull"')
        # The commons' client and httpx under it (0.2 s) load in a worker thread the first time, off the
        # event loop; an idle daemon does without them.
        await trio.to_thread.run_sync(importlib.import_module, "neverest.transports.commons_client")
        from neverest.transports import commons_client
        from neverest.transports.adapters import CommonsTransport

        try:
            token = commons_client.read_token(_str(request, "token_file"))
        except commons_client.CommonsError as exc:
            raise BadRequest(str(exc)) from None
        transport = CommonsTransport(_str(request, "url"), token, push=action == "push", pull=action == "pull")
        out = await self.state.worker.write(lambda memory: memory.sync(transport))
        if action == "pull":
            self._share_now()
        return {"result": out}


async def serve_control(ops: ControlOps, *, task_status: trio.TaskStatus[Path] = trio.TASK_STATUS_IGNORED) -> None:
    """The control socket in the home (mode 0600), answering with ``ops``."""
    await serve_socket(ops.state.home, ops.handle, ops.state.config.control_timeout_s, task_status=task_status)
