"""The daemon's control endpoint: a Unix socket in the home, private to its owner.

It serves ``neverestctl`` and local agents, never the network (the peer-facing
listener accepts only gossip).  One request per connection: the client sends one
JSON object on one line, the daemon answers one JSON object on one line and
closes.  Requests:

    {"op": "status"}                         the daemon's state (uptime, last sleep, ...)
    {"op": "remember", "events": [...]}      agents' events: the memory's third ingest door
    {"op": "sleep"}                          run a sleep now; answers its report

Answers carry ``"ok": true`` and the result, or ``"ok": false``, ``"error"`` and
``"fault"``, which says who must act:

- ``"fault": "client"``, ``"error": "bad request: …"``: the request is at fault (not
  UTF-8 or not JSON, not an object with an ``"op"``, over ``MAX_REQUEST_BYTES``, nested
  deeper than ``MAX_DEPTH``, not sent within ``control_timeout_s``, an unknown op or bad
  arguments: the handler raises ``BadRequest``);
- ``"fault": "daemon"``, ``"error": "internal error: …"``: the handler failed.  The
  traceback goes to the ``neverestd.control`` log and the daemon keeps serving.

No request, however malformed, stops the daemon.  The socket is created with mode 0600
inside the 0700 home, so only the owner can talk to the daemon.

The client is ``neverest.client`` (standard library only, so that the hook can use it too);
its names are importable from here as well, for the callers written before it moved.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import trio

from neverest.client import SOCKET_FILE as SOCKET_FILE
from neverest.client import ControlError as ControlError
from neverest.client import DaemonFailed as DaemonFailed
from neverest.client import DaemonNotRunning as DaemonNotRunning
from neverest.client import DaemonRefused as DaemonRefused
from neverest.client import ask as ask
from neverest.client import running as running

MAX_REQUEST_BYTES: Final = 4 * 1024 * 1024
# The keys of a status answer that only a running daemon knows (the rest is what the store holds).
DAEMON_KEYS: Final = ("version", "pid", "uptime_s", "next_sleep", "listen", "mdns", "peers", "last_round",
                      "exchanges", "warnings")
# Requests are flat objects with lists of flat events: 64 levels leave ample room, and
# bounding it keeps a hostile request from exhausting the parser's (or a handler's) stack.
MAX_DEPTH: Final = 64
# Connections served at once; more wait in the listen backlog.
MAX_CONNECTIONS: Final = 64
# accept() errors that mean "out of descriptors or memory for now": wait and go on.
_ACCEPT_CAPACITY_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
# Requests up to this size are parsed on the event loop (well under a millisecond).
_PARSE_INLINE_BYTES: Final = 64 * 1024

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

log = logging.getLogger("neverestd.control")


class BadRequest(ValueError):
    """Raised by a handler: the request is at fault (an unknown op, a bad argument).

    Only this class is: any other exception from a handler (a ``ValueError`` from a bug
    included) is the daemon's fault.
    """


# -- the server --------------------------------------------------------------------------

# A JSON string, escapes included, in the unrolled form (no backtracking).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")


def nesting_within(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the brackets of JSON text ``data`` nest at most ``limit`` deep.

    C-speed passes only: strings are cut out (their brackets are text), everything else but
    brackets dropped, then innermost pairs removed ``limit`` times; what is left is nested
    deeper (or unbalanced, which the parser refuses anyway).
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return True  # too few openers to nest deeper, wherever they are
    brackets = _JSON_STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    for _ in range(limit):
        shorter = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if not shorter:
            return True
        if len(shorter) == len(brackets):
            return False  # unbalanced or crossed: not JSON
        brackets = shorter
    return False


async def _read_request(stream: trio.SocketStream, timeout_s: float) -> dict[str, Any]:
    """The request sent on ``stream``; raises BadRequest saying what is wrong with it."""
    data = bytearray()
    try:
        with trio.fail_after(timeout_s):
            while b"\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                data += chunk
                if len(data) > MAX_REQUEST_BYTES:
                    raise BadRequest(f"request over {MAX_REQUEST_BYTES} bytes")
    except trio.TooSlowError:
        raise BadRequest(f"no complete request line within {timeout_s:g} s") from None
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        raise BadRequest("the connection broke before the request was complete") from None
    line = bytes(data).split(b"\n", 1)[0]
    if len(line) <= _PARSE_INLINE_BYTES:
        return _parse_request(line)
    # A large request (a few thousand events) takes a good fraction of a second to scan and
    # parse: in a worker thread, the event loop keeps serving gossip and other clients meanwhile.
    return await trio.to_thread.run_sync(_parse_request, line)


def _parse_request(line: bytes) -> dict[str, Any]:
    """The request in ``line``; raises BadRequest saying what is wrong with it."""
    if not nesting_within(line):
        raise BadRequest(f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        request = json.loads(line)
    except UnicodeDecodeError as exc:
        raise BadRequest(f"not UTF-8 at byte {exc.start}") from None
    except RecursionError:  # the scan above should have caught it; never let it out
        raise BadRequest("JSON nested too deeply") from None
    except ValueError as exc:
        raise BadRequest(f"not JSON: {exc}") from None
    if not isinstance(request, dict) or not isinstance(request.get("op"), str):
        raise BadRequest('a request is a JSON object with an "op"')
    return request


def _refusal(exc: Exception) -> dict[str, Any]:
    return {"ok": False, "error": f"bad request: {exc}"[:4096], "fault": "client"}


def _failure(exc: BaseException) -> dict[str, Any]:
    text = f"internal error: {type(exc).__name__}: {exc}"[:4096]
    return {"ok": False, "error": f"{text} (the daemon's log has the details)", "fault": "daemon"}


async def _answer_for(stream: trio.SocketStream, handler: Handler, timeout_s: float) -> bytes:
    """The encoded answer to the request on ``stream``; never raises an Exception."""
    try:
        request = await _read_request(stream, timeout_s)
    except BadRequest as exc:
        log.info("control: %s", _refusal(exc)["error"][:300])
        answer = _refusal(exc)
    else:
        op = str(request["op"])[:64]
        try:
            answer = {"ok": True} | await handler(request)
        except BadRequest as exc:  # the request's fault, said to its sender
            answer = _refusal(exc)
        except Exception as exc:  # a bug or a failure of ours: log it, answer it, keep serving
            log.exception("control: op %r failed", op)
            answer = _failure(exc)
    try:
        return json.dumps(answer).encode("utf-8") + b"\n"
    except (TypeError, ValueError, RecursionError) as exc:  # the handler returned what JSON cannot carry
        log.exception("control: the answer cannot be encoded as JSON")
        return json.dumps(_failure(exc)).encode("utf-8") + b"\n"


async def _serve_one(stream: trio.SocketStream, handler: Handler, timeout_s: float,
                     slots: trio.CapacityLimiter, slot: object) -> None:
    try:
        async with stream:
            data = await _answer_for(stream, handler, timeout_s)
            # A client that does not read its answer must not hold this task for ever.
            with trio.move_on_after(timeout_s):
                await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the client went away; nothing to tell it
    except Exception:  # never let one connection end the nursery, and with it the daemon
        log.exception("control: serving a connection failed")
    finally:
        slots.release_on_behalf_of(slot)


async def serve(home: Path, handler: Handler, timeout_s: float, *,
                task_status: trio.TaskStatus[Path] = trio.TASK_STATUS_IGNORED) -> None:
    """Listen on ``home/control.sock`` until cancelled; the socket file is removed on exit."""
    path = home / SOCKET_FILE
    path.unlink(missing_ok=True)  # a daemon killed with -9 leaves its socket behind
    listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    old_umask = os.umask(0o177)  # the socket file is born 0600: no moment when others could connect
    try:
        await listener.bind(str(path))
    finally:
        os.umask(old_umask)
    listener.listen(2 * MAX_CONNECTIONS)
    slots = trio.CapacityLimiter(MAX_CONNECTIONS)
    try:
        async with trio.open_nursery() as nursery:
            task_status.started(path)
            sock_listener = trio.SocketListener(listener)
            while True:
                slot = object()  # the connection's claim on one of the slots, released when it ends
                await slots.acquire_on_behalf_of(slot)
                try:
                    stream = await sock_listener.accept()
                except OSError as exc:
                    slots.release_on_behalf_of(slot)
                    if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                        raise
                    log.error("control: cannot accept a connection (%s); retrying in 0.1 s", exc)
                    await trio.sleep(0.1)
                    continue
                except BaseException:
                    slots.release_on_behalf_of(slot)
                    raise
                nursery.start_soon(_serve_one, stream, handler, timeout_s, slots, slot)
    finally:
        path.unlink(missing_ok=True)
