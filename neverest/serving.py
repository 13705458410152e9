"""What every Neverest server shares: hypercorn's trio worker with the same bounds, the ASGI
lifespan handshake, one bounded reader of a request's body, and a clean stop on SIGINT and SIGTERM."""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

import trio

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def lifespan(receive: Receive, send: Send) -> None:
    """Answer the ASGI lifespan protocol: these apps have nothing to start or stop."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def handled_by_server(scope: dict[str, Any], receive: Receive, send: Send) -> bool:
    """Whether ``scope`` is not an HTTP request and was dealt with here (lifespan answered, others
    ignored): what every app of these servers does before its own routing."""
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return True
    return bool(scope["type"] != "http")


class BodyRefused(Exception):
    """A request's body is not taken, through the client's fault; the message is safe to send back.

    ``status`` and ``code``: 400 ``bad-request`` (a Content-Length that is not a number), 413
    ``too-large`` (over the limit) or 408 ``body-timeout`` (not all there in time).
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class ClientGone(Exception):
    """The client disconnected before its body was complete: there is nobody to answer."""


async def read_body(headers: Iterable[tuple[bytes, bytes]], receive: Receive, *, limit: int, timeout_s: float
                    ) -> bytes:
    """The body of a request with ``headers`` (the ASGI scope's): at most ``limit`` bytes, all of it
    within ``timeout_s``.

    Every remote byte is hostile: a body declared over the limit is refused before a byte of it is
    read, and one sent without a Content-Length (or with a false one) as soon as the next chunk would
    take it over, before that chunk is kept.  Raises ``BodyRefused`` or ``ClientGone``.
    """
    for name, value in headers:
        if name.lower() == b"content-length":
            if not value.isdigit():
                raise BodyRefused(400, "bad-request", "Content-Length is not a number")
            if int(value) > limit:
                raise BodyRefused(413, "too-large", f"the body is {int(value)} bytes; the limit is {limit}")
    body = bytearray()
    try:
        with trio.fail_after(timeout_s):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientGone
                chunk = message.get("body", b"")
                if len(body) + len(chunk) > limit:
                    raise BodyRefused(413, "too-large", f"the body is over {limit} bytes")
                body += chunk
                if not message.get("more_body", False):
                    return bytes(body)
    except trio.TooSlowError:
        raise BodyRefused(408, "body-timeout", f"the body did not arrive within {timeout_s:g} s") from None


KEEP_ALIVE_TIMEOUT_S: Final = 5.0


async def serve_asgi(app: Any, listen: str, *, logger: str, server_headers: bool = True,
                     keep_alive_timeout_s: float = KEEP_ALIVE_TIMEOUT_S,
                     task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``app`` on ``listen`` (HOST:PORT) with hypercorn's trio worker until cancelled;
    reports the bound addresses through ``task_status``.  ``server_headers=False``: hypercorn adds
    no ``date`` or ``server`` header of its own (a proxy passes its upstream's)."""
    from hypercorn.config import Config as HyperConfig
    from hypercorn.trio import serve as hyper_serve

    config = HyperConfig()
    config.bind = [listen]
    config.accesslog = None
    config.errorlog = logging.getLogger(logger)
    # hypercorn's trio worker keeps a connection's socket open until this timeout even after the
    # client closed it (it waits for its idle timer before closing): measured, 30 daemons gossiping
    # every second held 1 124 sockets in CLOSE-WAIT with 30 s.  Our clients close idle connections
    # after httpclient.KEEPALIVE_EXPIRY_S (4 s), so each lingers about a second.  (Gossip keeps
    # its connections longer: gossip/http.py.)
    config.keep_alive_timeout = keep_alive_timeout_s
    config.read_timeout = 60  # an idle connection that never sends a request
    config.h11_max_incomplete_size = 16 * 1024  # request line and headers
    config.graceful_timeout = 2
    config.include_date_header = config.include_server_header = server_headers
    await hyper_serve(app, config, task_status=task_status)


async def stop_on_signals(scope: trio.CancelScope, log: logging.Logger,
                          task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Cancel ``scope`` on SIGINT or SIGTERM.  Start it first (``nursery.start``): from then on a
    signal means a clean stop, not the default death."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            log.info("%s: shutting down", signal.Signals(signum).name)
            scope.cancel()
            return
