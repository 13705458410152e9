"""The loopback JSON API: ``POST /v1/<operation>`` with the operation's arguments as a JSON object, for
programs that speak HTTP.  It is not MCP over HTTP: one plain request, one JSON answer.

It runs inside ``neverestd`` when ``api_listen`` is set (``services/api.py``), or by itself with
``neverestctl api --listen ADDR``.  The operations are those of ``agents/operations.py``, as the stdio
bridge and the MCP server have them; the answers are the bridge's:

    200  {"ok": true, "operation": NAME, "result": {...}}
    4xx  {"ok": false, "error": {"code": CODE, "message": TEXT, "argument": NAME}}

- **The token.**  Every request carries ``Authorization: Bearer <token>``; the token is made on the
  first start in ``<home>/api-token`` (32 random bytes in hex, mode 0600: only the owner can read it,
  and a token file others can read, or another user owns, stops the start).  Compared in constant time
  (``hmac.compare_digest``).  Without it, or with another: 401 with ``WWW-Authenticate: Bearer``,
  before anything else is looked at.  Delete the file and restart to make a new token.
- **What is refused**, in this order: 401 (token), 404 ``unknown-operation`` (another path or
  operation), 405 (another method than POST), 415 ``unsupported-media-type`` (a Content-Type other than
  ``application/json``; none is taken as JSON), 413 ``too-large`` (a body over ``MAX_BODY_BYTES``,
  refused by its Content-Length before a byte is read), 408 (a body not all there within
  ``BODY_TIMEOUT_S``), 400 ``bad-json`` (not UTF-8 JSON, or not an object; an empty body is no
  arguments), then the operation's own: 400 ``bad-request``/``bad-arguments`` naming the argument,
  404 ``not-found``, 422 ``refused``, and 500 ``failed`` when the memory failed.
- **Loopback only.**  ``check_listen`` refuses an address that is not loopback (127.0.0.0/8, ::1,
  ``localhost``) unless the owner forces it (``--allow-remote``, ``api_allow_remote = true``): the API
  reads and writes this memory over plain HTTP, so anyone on the network who learns the token could.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import stat
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import trio

from neverest.agents.operations import OperationError, OperationFailed, Request, decode_json, prepare, run_here
from neverest.clock import Clock
from neverest.services.listen import ListenError, parse_listen
from neverest.serving import (
    BodyRefused,
    ClientGone,
    Receive,
    Send,
    handled_by_server,
    read_body,
    serve_asgi,
    stop_on_signals,
)

log = logging.getLogger("neverest.api")

TOKEN_FILE: Final = "api-token"
MAX_BODY_BYTES: Final = 1024 * 1024
BODY_TIMEOUT_S: Final = 30.0
AGENT: Final = "api"  # the agent named in the events the API stores (unless the request names one)
_PATH: Final = re.compile(r"/v1/([a-z_]{1,32})")
_TOKEN: Final = re.compile(r"[A-Za-z0-9\-._~+/]{16,512}=*")
# The HTTP status of each error code (``operations.OperationError`` and the API's own).
STATUS: Final[dict[str, int]] = {
    "unauthorized": 401, "unknown-operation": 404, "method-not-allowed": 405, "unsupported-media-type": 415,
    "too-large": 413, "body-timeout": 408, "bad-json": 400, "bad-request": 400, "bad-arguments": 400,
    "not-found": 404, "refused": 422, "failed": 500,
}

Runner = Callable[[Request], Awaitable[dict[str, Any]]]


class TokenError(Exception):
    """The token file cannot be used; the message says what the owner should do."""


def api_token(home: Path) -> bytes:
    """The API's bearer token, made on first use in ``<home>/api-token`` (mode 0600).  Raises TokenError."""
    path = home / TOKEN_FILE
    if not os.path.lexists(path):
        # Written whole to a private temporary file, then linked into place: two processes starting at
        # once agree on one token, and nobody ever reads a half-written one.
        fd, temporary = tempfile.mkstemp(prefix=".api-token-", dir=home)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(secrets.token_hex(32) + "\n")
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(temporary, path)
            except FileExistsError:
                pass  # another process made it first: its token is the one
        finally:
            os.unlink(temporary)
    return read_token(path)


def read_token(path: Path) -> bytes:
    """The token in ``path``, once the file is found private to this user.  Raises TokenError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise TokenError(f"cannot read the API token {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            raise TokenError(f"{path} is not a file of this user's: delete it, and a new token is made at the "
                             "next start")
        if st.st_mode & 0o077:
            raise TokenError(f"{path} can be read by others (mode {stat.S_IMODE(st.st_mode):04o}): anyone could "
                             f"use this memory's API; delete it (a new token is made at the next start) or "
                             f"run `chmod 600 {path}`")
        token = f.read(4096).strip()
    if not _TOKEN.fullmatch(token.decode("ascii", "replace")):
        raise TokenError(f"{path} does not hold a token (16 to 512 characters of A-Z a-z 0-9 - . _ ~ + /): "
                         "delete it, and a new one is made at the next start")
    return token


def check_listen(listen: str, *, allow_remote: bool) -> tuple[str, int]:
    """``HOST:PORT`` for the API: a loopback address unless ``allow_remote``.  Raises ListenError."""
    host, port = parse_listen(listen)
    if host != "localhost" and not allow_remote:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ListenError(f"api listen {listen!r}: {host} is not a loopback address (127.0.0.1, ::1, "
                              "localhost); the API reads and writes this memory over plain HTTP, so anyone who "
                              "reaches it with the token could: force it with --allow-remote "
                              "(api_allow_remote = true) only if you mean it")
    return host, port


class ApiApp:
    """The ASGI app: the token, the routes, the bounds; ``runner`` runs a checked request on the memory."""

    def __init__(self, token: bytes, runner: Runner, clock: Clock, *, body_timeout_s: float = BODY_TIMEOUT_S
                 ) -> None:
        self.token = token
        self.runner = runner
        self.clock = clock
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if await handled_by_server(scope, receive, send):
            return
        try:
            status, reply = await self._answer(scope, receive)
        except ClientGone:
            return
        except Exception:
            log.exception("%s %r failed on our side", scope.get("method"), str(scope.get("path"))[:200])
            status, reply = 500, _error(OperationFailed("the API failed; the failure is logged").to_json())
        headers = [(b"www-authenticate", b'Bearer realm="neverest-api"')] if status == 401 else []
        if status == 405:
            headers.append((b"allow", b"POST"))
        body = json.dumps(reply, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff"), *headers]})
        await send({"type": "http.response.body", "body": body})

    def _authorised(self, headers: list[tuple[bytes, bytes]]) -> bool:
        presented = b""
        for name, value in headers:
            if name.lower() == b"authorization":
                scheme, _, credentials = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    presented = credentials.strip()
        # Constant time, whatever was presented: the time taken does not tell how much of it matched.
        return hmac.compare_digest(presented, self.token) and bool(presented)

    async def _answer(self, scope: dict[str, Any], receive: Receive) -> tuple[int, dict[str, Any]]:
        headers: list[tuple[bytes, bytes]] = list(scope.get("headers") or [])
        if not self._authorised(headers):
            return _refused("unauthorized", "send Authorization: Bearer <token> (the token is in the memory's "
                            f"home, {TOKEN_FILE})")
        path = str(scope.get("path", ""))
        match = _PATH.fullmatch(path)
        if match is None:
            return _refused("unknown-operation", "no such path: POST /v1/<operation>")
        if scope.get("method") != "POST":
            return _refused("method-not-allowed", f"{scope.get('method')} is not allowed here; use POST")
        content_type = next((v for n, v in headers if n.lower() == b"content-type"), None)
        if content_type is not None:
            media = content_type.split(b";", 1)[0].strip().lower()
            if media != b"application/json" and not media.endswith(b"+json"):
                return _refused("unsupported-media-type", "send the arguments as Content-Type: application/json")
        try:
            body = await read_body(headers, receive, limit=MAX_BODY_BYTES, timeout_s=self.body_timeout_s)
        except BodyRefused as exc:
            return exc.status, _error({"code": exc.code, "message": exc.message})
        try:
            arguments = _decode(body)
            request = prepare(match.group(1), arguments, agent=AGENT, now=self.clock.now())
            result = await self.runner(request)
        except OperationError as exc:
            return STATUS.get(exc.code, 400), _error(exc.to_json())
        except OperationFailed as exc:
            log.warning("%s failed: %s", path, exc)
            return 500, _error(exc.to_json())
        return 200, {"ok": True, "operation": request.operation.name, "result": result}


def _decode(body: bytes) -> object:
    if not body.strip():
        return {}
    arguments = decode_json(body, "the body")
    if not isinstance(arguments, dict):
        raise OperationError("bad-json", "the body is the operation's arguments: a JSON object")
    return arguments


def _error(error: dict[str, Any]) -> dict[str, Any]:
    return {"ok": False, "error": error}


def _refused(code: str, message: str) -> tuple[int, dict[str, Any]]:
    return STATUS[code], _error({"code": code, "message": message})


def runner_here(home: Path, clock: Clock) -> Runner:
    """Run requests in worker threads of this process (``run_here``: writes through the running daemon
    when there is one), for the API outside the daemon."""
    async def run(request: Request) -> dict[str, Any]:
        return await trio.to_thread.run_sync(run_here, request, home, clock)
    return run


async def serve(app: ApiApp, listen: str, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
                ) -> None:
    """Serve ``app`` on ``listen`` with hypercorn's trio worker until cancelled; the addresses bound go to
    ``task_status``."""
    await serve_asgi(app, listen, logger="neverest.api.hypercorn", task_status=task_status)


def run_alone(home: Path, clock: Clock, listen: str, *, allow_remote: bool) -> int:
    """``neverestctl api``: serve until SIGINT or SIGTERM; the address bound is printed on standard output
    once the API answers.  Exit status 2 for a refused address, 1 for a token or a port that cannot be used."""
    try:
        check_listen(listen, allow_remote=allow_remote)
    except ListenError as exc:
        print(f"neverestctl: {exc}", file=sys.stderr)
        return 2
    try:
        token = api_token(home)
    except (TokenError, OSError) as exc:
        print(f"neverestctl: {exc}", file=sys.stderr)
        return 1
    app = ApiApp(token, runner_here(home, clock), clock)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(stop_on_signals, nursery.cancel_scope, log)
            bound = await nursery.start(functools.partial(serve, app, listen))
            print(f"neverest API on {', '.join(bound)} (POST /v1/<operation>; token in {home / TOKEN_FILE})",
                  flush=True)

    try:
        trio.run(main)
    except OSError as exc:
        print(f"neverestctl: cannot listen on {listen}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        found = _os_error(group)
        if found is None:
            raise
        print(f"neverestctl: cannot listen on {listen}: {found.strerror or found}", file=sys.stderr)
        return 1
    return 0


def _os_error(exc: BaseException) -> OSError | None:
    from neverest.services.listen import first_of

    return first_of(exc, OSError)
