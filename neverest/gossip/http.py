"""The HTTP edge of gossip: an ASGI app served by hypercorn's trio worker, and its client.

Only this module knows about HTTP.  The app has one job: take the body of a
``POST /gossip/v1/exchange``, hand it to a responder (the sans-IO logic, run by the
daemon) and send back what the responder returns.  The peer-facing listener serves
nothing else: agents' events and control go through the Unix socket (control.py).

Bounds, so that a hostile peer costs little (every remote byte is hostile):

- a body over ``max_body_bytes`` is refused with 413 as soon as its Content-Length
  says so, or as soon as that many bytes have arrived without one, never buffered;
- the whole body must arrive within ``body_timeout_s`` (a peer trickling one byte a
  second is cut off with 408), and hypercorn's own read and keep-alive timeouts
  bound idle connections;
- the responder's errors say who is at fault: ``RemoteError`` (the peer's bytes were
  bad: 400 and a reason) versus anything else (our fault: 500, logged, no details).

The client posts with connect, read, write and pool timeouts, streams the answer and
stops reading at ``max_response_bytes``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import httpx
import trio

from neverest.serving import lifespan, serve_asgi

EXCHANGE_PATH: Final = "/gossip/v1/exchange"
CONTENT_TYPE: Final = "application/msgpack"
DEFAULT_MAX_BODY_BYTES: Final = 8 * 1024 * 1024
DEFAULT_BODY_TIMEOUT_S: Final = 30.0

log = logging.getLogger("neverestd.http")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Responder = Callable[[bytes, str], Awaitable[bytes]]  # (body, client address) -> answer body


class RemoteError(Exception):
    """The peer sent something unacceptable; the message is safe to send back to it."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass
class GossipApp:
    responder: Responder
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["path"] != EXCHANGE_PATH:
            await _answer(send, 404, b"not found\n", "text/plain")
            return
        if scope["method"] != "POST":
            await _answer(send, 405, b"POST only\n", "text/plain")
            return
        client = scope.get("client") or ("?", 0)
        try:
            body = await self._read_body(scope, receive)
            answer = await self.responder(body, f"{client[0]}:{client[1]}")
        except RemoteError as exc:
            await _answer(send, exc.status, exc.reason.encode("utf-8") + b"\n", "text/plain")
            return
        except Exception:
            log.exception("gossip exchange from %s failed on our side", client[0])
            await _answer(send, 500, b"internal error\n", "text/plain")
            return
        await _answer(send, 200, answer, CONTENT_TYPE)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise RemoteError("bad Content-Length") from None
                if declared > self.max_body_bytes:
                    raise RemoteError(f"body over {self.max_body_bytes} bytes", 413)
        body = bytearray()
        try:
            with trio.fail_after(self.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise RemoteError("the peer went away", 400)
                    body += message.get("body", b"")
                    if len(body) > self.max_body_bytes:
                        raise RemoteError(f"body over {self.max_body_bytes} bytes", 413)
                    if not message.get("more_body", False):
                        return bytes(body)
        except trio.TooSlowError:
            raise RemoteError(f"the body did not arrive within {self.body_timeout_s:g} s", 408) from None


async def _answer(send: Send, status: int, body: bytes, content_type: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class ExchangeFailed(Exception):
    """An exchange with a peer did not complete.  ``kind`` is a peer-table penalty kind."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


def client(*, connect_timeout_s: float = 5.0, read_timeout_s: float = 30.0) -> httpx.AsyncClient:
    timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s, write=read_timeout_s, pool=connect_timeout_s)
    return httpx.AsyncClient(timeout=timeout, follow_redirects=False, headers={"content-type": CONTENT_TYPE})


async def post(http: httpx.AsyncClient, base_url: str, body: bytes, *, max_response_bytes: int,
               total_timeout_s: float = 120.0) -> bytes:
    """POST ``body`` to a peer's exchange endpoint; the answer's body, bounded and timed."""
    try:
        with trio.fail_after(total_timeout_s):
            async with http.stream("POST", base_url + EXCHANGE_PATH, content=body) as response:
                data = bytearray()
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > max_response_bytes:
                        raise ExchangeFailed("oversize", f"answer over {max_response_bytes} bytes")
                if response.status_code != 200:
                    text = bytes(data[:200]).decode("utf-8", "replace").strip()
                    raise ExchangeFailed("protocol", f"HTTP {response.status_code}: {text}")
                return bytes(data)
    except trio.TooSlowError:
        raise ExchangeFailed("timeout", f"no complete answer within {total_timeout_s:g} s") from None
    except httpx.TimeoutException as exc:
        raise ExchangeFailed("timeout", str(exc) or type(exc).__name__) from None
    except httpx.HTTPError as exc:
        raise ExchangeFailed("unreachable", str(exc) or type(exc).__name__) from None


async def serve(app: GossipApp, listen: str, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
                ) -> None:
    """Serve ``app`` on ``listen`` (HOST:PORT) with hypercorn's trio worker until cancelled."""
    await serve_asgi(app, listen, logger="neverestd.hypercorn", task_status=task_status)
