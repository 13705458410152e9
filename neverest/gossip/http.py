"""The HTTP edge of gossip: an ASGI app served by hypercorn's trio worker, and its client.

Only this module knows about HTTP.  The app's main job: take the body of a
``POST /gossip/v1/exchange``, hand it to a responder (the sans-IO logic, run by the
daemon) and send back what the responder returns.  Besides, for whoever watches the
daemon: ``GET /healthz`` answers ``ok`` (the listener and its event loop are alive) and
``GET /metrics`` the Prometheus text exposition (version 0.0.4) that the ``metrics``
callback renders (404 when the app has none).  Nothing else is served: agents' events
and control go through the Unix socket (control.py).

Bounds, so that a hostile peer costs little (every remote byte is hostile):

- a body over ``max_body_bytes`` is refused with 413 as soon as its Content-Length
  says so, or as soon as the next chunk would take it over without one, never buffered;
- the whole body must arrive within ``body_timeout_s`` (a peer trickling one byte a
  second is cut off with 408), and hypercorn's own read and keep-alive timeouts
  bound idle connections (the body reader is every server's, ``serving.read_body``);
- a peer the ``cutoff`` callback names (it kept sending invalid requests) is answered 429
  with ``Retry-After`` before its body is read, after a delay (``tarpit_s``), and the
  connection is closed (the callback may let a cut-off address's requests be read, for the
  responder to answer those signed by origins it vouches for and 429 the rest); the edge's
  own refusals of a body (413, 408, a bad Content-Length) are reported to ``refused`` so
  that they count towards a cut-off too;
- the responder's errors say who is at fault: ``RemoteError`` (the peer's bytes were
  bad: 400 and a reason) versus anything else (our fault: 500, logged, no details).

The client is ``neverest.httpclient``'s: a total deadline, the answer streamed and cut at
``max_response_bytes``, and errors that say whether the network failed
(``TransportFailure``) or the peer refused (``PeerRefused``).  It (and httpx under it) is
imported by the first client made, not with this module: a daemon that serves but has not
yet called a peer does without it (``load_client`` loads it ahead, in a worker thread).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import trio

from neverest.serving import BodyRefused, ClientGone, handled_by_server, read_body, serve_asgi

EXCHANGE_PATH: Final = "/gossip/v1/exchange"
HEALTH_PATH: Final = "/healthz"
METRICS_PATH: Final = "/metrics"
CONTENT_TYPE: Final = "application/msgpack"
METRICS_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_MAX_BODY_BYTES: Final = 8 * 1024 * 1024
DEFAULT_BODY_TIMEOUT_S: Final = 30.0
DEFAULT_TARPIT_S: Final = 1.0
# A connection to a peer is kept for the next exchange with it, for longer than other servers
# keep theirs (serving.KEEP_ALIVE_TIMEOUT_S): rounds come every gossip_every_s and, while
# quiet, further apart, and a peer is picked again within seconds while anything moves.  A
# new TCP connection per exchange cost an in-sync exchange its handshake and teardown (7
# packets, about 460 bytes on the wire) and both ends their share of CPU (connect, accept, a
# new h11 state), measured with benchmarks/bench_serf.py.  The client lets a connection go
# before the server does, so that it never sends on one the server is closing; an idle kept
# connection sends nothing.
KEEP_ALIVE_S: Final = 30.0  # the listener's idle timeout for a kept connection
CLIENT_KEEPALIVE_S: Final = 25.0  # the client's: under the listener's
CLIENT_KEPT_CONNECTIONS: Final = 64  # kept connections in all (httpx's default: 20)

if TYPE_CHECKING:  # the client side (httpx, about 6 MB resident) is loaded by the first client made
    import httpx

log = logging.getLogger("neverestd.http")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Responder = Callable[[bytes, str], Awaitable[bytes]]  # (body, client address) -> answer body
Metrics = Callable[[], Awaitable[str]]  # the Prometheus text exposition of the daemon now
Cutoff = Callable[[str], float | None]  # client host -> seconds it stays cut off (None: it is heard)
Refused = Callable[[str, str], None]  # (client host, reason): the edge refused a request's body


class RemoteError(Exception):
    """The peer sent something unacceptable; the message is safe to send back to it."""

    def __init__(self, reason: str, status: int = 400, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.headers = headers or []  # extra response headers (a 429's Retry-After)


@dataclass
class GossipApp:
    responder: Responder
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    metrics: Metrics | None = None
    cutoff: Cutoff | None = None
    # A cut-off peer waits this long for its 429: a flooder on one connection is slowed to about
    # one request per tarpit, instead of costing this event loop a parse and an answer per request.
    tarpit_s: float = DEFAULT_TARPIT_S
    refused: Refused | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if await handled_by_server(scope, receive, send):
            return
        if scope["path"] == HEALTH_PATH or (scope["path"] == METRICS_PATH and self.metrics is not None):
            await self._observe(scope, send)
            return
        if scope["path"] != EXCHANGE_PATH:
            await _answer(send, 404, b"not found\n", "text/plain")
            return
        if scope["method"] != "POST":
            await _answer(send, 405, b"POST only\n", "text/plain")
            return
        client = scope.get("client") or ("?", 0)
        host = str(client[0])
        left = None if self.cutoff is None else self.cutoff(host)
        if left is not None:
            # Not a byte of the body is read; h11 closes the connection after a "close" answer.
            await trio.sleep(min(left, self.tarpit_s))
            await _answer(send, 429, b"too many invalid requests: cut off for a while\n", "text/plain",
                          [(b"retry-after", str(max(1, round(left))).encode()), (b"connection", b"close")])
            return
        try:
            body = await self._read_body(scope, receive)
        except RemoteError as exc:
            if self.refused is not None:
                self.refused(host, f"http-{exc.status}")
            await _answer(send, exc.status, exc.reason.encode("utf-8") + b"\n", "text/plain")
            return
        try:
            answer = await self.responder(body, f"{client[0]}:{client[1]}")
        except RemoteError as exc:
            await _answer(send, exc.status, exc.reason.encode("utf-8") + b"\n", "text/plain", exc.headers)
            return
        except Exception:
            log.exception("gossip exchange from %s failed on our side", client[0])
            await _answer(send, 500, b"internal error\n", "text/plain")
            return
        await _answer(send, 200, answer, CONTENT_TYPE)

    async def _observe(self, scope: Scope, send: Send) -> None:
        """``GET /healthz`` or ``GET /metrics``; the request's body, if any, is not read."""
        if scope["method"] != "GET":
            await _answer(send, 405, b"GET only\n", "text/plain")
            return
        if scope["path"] == HEALTH_PATH:
            await _answer(send, 200, b"ok\n", "text/plain; charset=utf-8")
            return
        assert self.metrics is not None
        try:
            text = await self.metrics()
        except Exception:
            log.exception("rendering /metrics failed on our side")
            await _answer(send, 500, b"internal error\n", "text/plain")
            return
        await _answer(send, 200, text.encode("utf-8"), METRICS_CONTENT_TYPE)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        try:
            return await read_body(scope.get("headers", []), receive, limit=self.max_body_bytes,
                                   timeout_s=self.body_timeout_s)
        except BodyRefused as exc:
            raise RemoteError(exc.message, exc.status) from None
        except ClientGone:  # a peer that hangs up mid-body is counted towards a cut-off like a refused body
            raise RemoteError("the peer went away", 400) from None


async def _answer(send: Send, status: int, body: bytes, content_type: str,
                  extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body})


def load_client() -> None:
    """Import the client side (httpx: about 0.2 s and 6 MB): for a worker thread, before the first ``client``.
    httpcore too, which the client's transport imports at its first request (``httpclient._LazyPlain``):
    else that request held the event loop 22 ms, answering no peer meanwhile."""
    import httpcore  # noqa: F401

    import neverest.httpclient  # noqa: F401


def client(*, transport: httpx.AsyncBaseTransport | None = None, connect_timeout_s: float = 5.0,
           read_timeout_s: float = 30.0) -> httpx.AsyncClient:
    """The client an initiator posts exchanges with (``post``); reuse it for many exchanges.

    Its requests carry no ``accept``, ``connection`` (HTTP/1.1 keeps a connection by default) or
    ``user-agent``: 68 bytes of each exchange that no listener reads."""
    import httpx

    from neverest import httpclient

    http = httpclient.async_client(transport=transport, connect_timeout_s=connect_timeout_s,
                                   read_timeout_s=read_timeout_s, headers={"content-type": CONTENT_TYPE},
                                   limits=httpx.Limits(max_keepalive_connections=CLIENT_KEPT_CONNECTIONS,
                                                       keepalive_expiry=CLIENT_KEEPALIVE_S))
    for name in ("accept", "connection", "user-agent"):
        del http.headers[name]
    return http


async def post(http: httpx.AsyncClient, base_url: str, body: bytes, *, max_response_bytes: int,
               total_timeout_s: float = 120.0) -> bytes:
    """POST ``body`` to a peer's exchange endpoint; the answer's body, bounded and timed.

    Raises ``httpclient.TransportFailure`` (the network failed) or ``httpclient.PeerRefused``
    (the peer answered with another status than 200, or more than ``max_response_bytes``).
    """
    from neverest import httpclient

    answer = await httpclient.post_bounded(http, base_url + EXCHANGE_PATH, body, max_bytes=max_response_bytes,
                                           total_timeout_s=total_timeout_s)
    return answer.body


async def serve(app: GossipApp, listen: str, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
                ) -> None:
    """Serve ``app`` on ``listen`` (HOST:PORT) with hypercorn's trio worker until cancelled.  Without
    hypercorn's ``date`` and ``server`` headers: nothing reads them, and they were 60 of the 1.4-1.7 KB an
    in-sync exchange puts on the wire."""
    await serve_asgi(app, listen, logger="neverestd.hypercorn", keep_alive_timeout_s=KEEP_ALIVE_S,
                     server_headers=False, task_status=task_status)
