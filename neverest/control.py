"""The daemon's control endpoint: a Unix socket in the home, private to its owner.

It serves ``neverestctl`` and local agents, never the network (the peer-facing
listener accepts only gossip).  One request per connection: the client sends one
JSON object on one line, the daemon answers one JSON object on one line and
closes.  Requests:

    {"op": "status"}                         the daemon's state (uptime, last sleep, ...)
    {"op": "remember", "events": [...]}      agents' events: the memory's third ingest door
    {"op": "sleep"}                          run a sleep now; answers its report

Answers carry ``"ok": true`` and the result, or ``"ok": false`` and ``"error"``.
A request is at most ``MAX_REQUEST_BYTES``; a client has ``control_timeout_s`` to
send it.  The socket is created with mode 0600 inside the 0700 home, so only the
owner can talk to the daemon.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import trio

SOCKET_FILE: Final = "control.sock"
MAX_REQUEST_BYTES: Final = 4 * 1024 * 1024

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class ControlError(Exception):
    """The daemon could not be asked (not running, or it answered with an error)."""


async def _read_request(stream: trio.SocketStream, timeout_s: float) -> dict[str, Any]:
    data = bytearray()
    with trio.fail_after(timeout_s):
        while b"\n" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                break
            data += chunk
            if len(data) > MAX_REQUEST_BYTES:
                raise ValueError(f"request over {MAX_REQUEST_BYTES} bytes")
    request = json.loads(bytes(data).split(b"\n", 1)[0])
    if not isinstance(request, dict) or not isinstance(request.get("op"), str):
        raise ValueError('a request is a JSON object with an "op"')
    return request


async def _serve_one(stream: trio.SocketStream, handler: Handler, timeout_s: float) -> None:
    async with stream:
        try:
            request = await _read_request(stream, timeout_s)
        except (ValueError, trio.TooSlowError, UnicodeDecodeError) as exc:
            answer: dict[str, Any] = {"ok": False, "error": f"bad request: {exc}"}
        else:
            try:
                answer = {"ok": True} | await handler(request)
            except ValueError as exc:  # the request's fault, said to its sender
                answer = {"ok": False, "error": str(exc)}
        try:
            await stream.send_all(json.dumps(answer).encode("utf-8") + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away; nothing to tell it


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
    listener.listen(16)
    try:
        async with trio.open_nursery() as nursery:
            task_status.started(path)
            sock_listener = trio.SocketListener(listener)
            while True:
                stream = await sock_listener.accept()
                nursery.start_soon(_serve_one, stream, handler, timeout_s)
    finally:
        path.unlink(missing_ok=True)


def ask(home: Path, request: dict[str, Any], *, timeout_s: float = 600.0) -> dict[str, Any]:
    """Send one request to the daemon of ``home`` (blocking; for neverestctl)."""
    path = home / SOCKET_FILE
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(str(path))
            sock.sendall(json.dumps(request).encode("utf-8") + b"\n")
            data = bytearray()
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise ControlError(f"no daemon is running for {home}") from exc
    except OSError as exc:
        raise ControlError(f"the daemon for {home} did not answer: {exc}") from exc
    try:
        answer = json.loads(bytes(data))
    except ValueError as exc:
        raise ControlError("the daemon's answer was not JSON") from exc
    if not isinstance(answer, dict) or not answer.get("ok"):
        raise ControlError(str(answer.get("error") if isinstance(answer, dict) else answer))
    return answer


def running(home: Path) -> bool:
    try:
        ask(home, {"op": "ping"}, timeout_s=2.0)
    except ControlError:
        return False
    return True
