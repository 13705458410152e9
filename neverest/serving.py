"""What every Neverest server shares: hypercorn's trio worker with the same bounds, the ASGI
lifespan handshake, and a clean stop on SIGINT and SIGTERM."""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable
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


KEEP_ALIVE_TIMEOUT_S: Final = 5.0


async def serve_asgi(app: Any, listen: str, *, logger: str, server_headers: bool = True,
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
    # after httpclient.KEEPALIVE_EXPIRY_S (4 s), so each lingers about a second.
    config.keep_alive_timeout = KEEP_ALIVE_TIMEOUT_S
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
