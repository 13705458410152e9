"""The one client of the daemon's control socket: ask the daemon, else do it here.

Every door that writes to a home goes through the running daemon when there is one, since it is the
home's one writer and shares what changed at once: ``neverestctl`` (``commands.common``), the MCP
server and the hook.  Each calls ``ask_daemon``: the daemon's answer, or None when no daemon runs for
the home, and the caller then does the work on the store itself.

The protocol is ``neverest.control``'s: one request per connection, one JSON object on one line each
way.  An answer that is not ``"ok": true`` raises what says who must act:

- ``DaemonNotRunning``: nothing listens on the home's socket (``ask_daemon`` answers None instead);
- ``DaemonRefused``: the request is at fault (a bad argument, an owner's mistake): fix the request;
- ``DaemonFailed``: the daemon failed on it, or did not answer within ``timeout_s``: see its log.

Standard library only, so that the hook, which must not load trio, uses this same client.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

SOCKET_FILE: Final = "control.sock"
# What an answer may be at most: a status with many peers is large, never this large.
MAX_ANSWER_BYTES: Final = 64 * 1024 * 1024
DEFAULT_TIMEOUT_S: Final = 600.0  # a sleep through the daemon reads and learns for a while
# The keys of a status answer that only a running daemon knows (the rest is what the store holds).
DAEMON_KEYS: Final = ("version", "pid", "uptime_s", "next_sleep", "listen", "proxy", "api", "mdns", "peers",
                      "last_round", "exchanges", "warnings")


class ControlError(Exception):
    """The daemon could not be asked, refused the request, or failed on it."""


class DaemonNotRunning(ControlError):
    """No daemon listens on the home's control socket."""


class DaemonRefused(ControlError):
    """The daemon refused the request: the client (the request) is at fault."""


class DaemonFailed(ControlError):
    """The daemon failed on the request, or did not answer: the daemon is at fault."""


def ask(home: Path, request: dict[str, Any], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Send one request to the daemon of ``home`` (blocking, for at most ``timeout_s`` per step).

    Returns the answer (``"ok": true``).  Raises ``DaemonNotRunning``, ``DaemonRefused``
    (the request is at fault) or ``DaemonFailed`` (the daemon failed or did not answer).
    """
    path = home / SOCKET_FILE
    if not path.exists():
        # No socket file, no daemon: said without importing socket (2 ms of a read command without one).
        raise DaemonNotRunning(f"no daemon is running for {home}")
    import socket

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            try:
                sock.connect(str(path))
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                raise DaemonNotRunning(f"no daemon is running for {home}") from exc
            sock.sendall(json.dumps(request).encode("utf-8") + b"\n")
            data = bytearray()
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
                if len(data) > MAX_ANSWER_BYTES:
                    raise DaemonFailed(f"the daemon for {home} answered more than {MAX_ANSWER_BYTES} bytes")
    except OSError as exc:  # a timeout included: the daemon is there and did not answer in time
        raise DaemonFailed(f"the daemon for {home} did not answer: {exc}") from exc
    if not data:
        raise DaemonFailed(f"the daemon for {home} closed the connection without an answer (see its log)")
    try:
        answer = json.loads(bytes(data))
    except (ValueError, RecursionError) as exc:
        raise DaemonFailed("the daemon's answer was not JSON") from exc
    if not isinstance(answer, dict):
        raise DaemonFailed("the daemon's answer was not a JSON object")
    if answer.get("ok") is True:
        return answer
    error = str(answer.get("error") or "the daemon refused the request without saying why")
    # A daemon from before the "fault" field only ever refused requests for their own fault.
    if answer.get("fault", "client") == "daemon":
        raise DaemonFailed(error)
    raise DaemonRefused(error)


def ask_daemon(home: Path, request: dict[str, Any], *, timeout_s: float = DEFAULT_TIMEOUT_S
               ) -> dict[str, Any] | None:
    """The running daemon's answer to ``request``, or None when no daemon runs for ``home``: the
    caller then does the work here.  Raises ``DaemonRefused`` and ``DaemonFailed`` as ``ask`` does."""
    try:
        return ask(home, request, timeout_s=timeout_s)
    except DaemonNotRunning:
        return None


def running(home: Path) -> bool:
    """Whether a daemon answers on ``home``'s control socket."""
    try:
        ask(home, {"op": "ping"}, timeout_s=2.0)
    except DaemonRefused:
        return True  # it answered: it runs, even if it does not know "ping"
    except ControlError:
        return False
    return True
