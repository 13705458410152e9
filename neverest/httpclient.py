"""Every outgoing HTTP call: one bounded client for gossip, the directory, the commons and the model.

The far end is untrusted (a peer, a directory, a commons, a local model server), so a call
is bounded in time and in bytes whatever it does:

- a *total* deadline: httpx's timeouts are per connect and per read, so a server trickling
  one byte a second could hold a call for ever.  The async helpers run under
  ``trio.fail_after``; the sync ones check a monotonic deadline between chunks and bound each
  read by the deadline too, so a call ends within twice its deadline;
- a body cap: the answer is streamed and refused as soon as more than ``max_bytes`` arrived
  (or its Content-Length says so), never buffered whole; bodies are asked for uncompressed
  (``Accept-Encoding: identity``) and counted after any decoding, so a compressed bomb is cut;
- redirects are not followed and the environment's proxy settings are not read: a peer's
  address is where the bytes go.

Errors say who is at fault:

- ``TransportFailure`` (``kind`` "timeout" or "unreachable"): the network did not carry the
  call (nothing listening, a reset, a deadline passed).  Not the peer's misbehaviour: back
  off and try later, no penalty for what it said;
- ``PeerRefused``: the far end answered, and refused (an HTTP status the caller does not
  accept, with the start of its body as ``detail``), or answered more than the cap
  (``oversize``).

A plain ``http://`` call never loads the CA bundle (about 50 ms per client); an ``https://``
call is verified as always, with one TLS context per process made at its first use.

Each constructor takes an injectable ``httpx`` transport (``httpx.MockTransport`` in tests,
an in-memory network in the simulator), so no test needs threads or servers to fake the
network.
"""

from __future__ import annotations

import functools
import logging
import ssl
import time
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Final, Literal

import httpx
import trio

# httpx logs every request at INFO ("HTTP Request: POST ... 200 OK"): one line per gossip
# round trip drowns the daemon's own log.  Warnings and errors still show.
for _name in ("httpx", "httpcore"):
    logging.getLogger(_name).setLevel(logging.WARNING)

DEFAULT_CONNECT_TIMEOUT_S: Final = 5.0
DEFAULT_READ_TIMEOUT_S: Final = 30.0
# An idle pooled connection is closed after this long: before the servers' own keep-alive
# timeout (serving.KEEP_ALIVE_TIMEOUT_S, 5 s), so that the client, not the server, closes it and
# never sends a request on a connection the server is closing.
KEEPALIVE_EXPIRY_S: Final = 4.0
DETAIL_BYTES: Final = 2048  # how much of a refusal's body is read for its message
DETAIL_CHARS: Final = 200

TransportKind = Literal["timeout", "unreachable"]


class HttpFailure(Exception):
    """A call did not give an acceptable answer; ``url`` is where it went."""

    def __init__(self, url: str, message: str) -> None:
        super().__init__(message)
        self.url = url


class TransportFailure(HttpFailure):
    """The network did not carry the call: a timeout, nothing listening, a reset.  Not a refusal."""

    def __init__(self, url: str, kind: TransportKind, detail: str) -> None:
        super().__init__(url, f"{url}: {kind}: {detail}")
        self.kind: TransportKind = kind
        self.detail = detail


class PeerRefused(HttpFailure):
    """The far end answered and refused: an HTTP status not accepted, or a body over the cap.

    ``status`` is the HTTP status; ``oversize`` says the body (or its Content-Length) was over
    the cap; ``detail`` is a short, printable excerpt of the refusal's body, or what was wrong.
    """

    def __init__(self, url: str, status: int, detail: str, *, oversize: bool = False) -> None:
        what = "answered over the limit" if oversize else f"answered HTTP {status}"
        super().__init__(url, f"{url} {what}" + (f": {detail}" if detail else ""))
        self.status = status
        self.detail = detail
        self.oversize = oversize


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: httpx.Headers
    body: bytes


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Loading the CA bundle costs about 50 ms: once per process, and only when an https://
    # URL is actually called.
    return httpx.create_ssl_context()


class _LazyTLS(httpx.AsyncBaseTransport):
    """The https:// transport of an async client, made (and the CA bundle loaded) at its first use."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._inner: httpx.AsyncHTTPTransport | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._inner is None:
            self._inner = httpx.AsyncHTTPTransport(verify=_tls_context(), trust_env=False, limits=self._limits)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        if self._inner is not None:
            await self._inner.aclose()


class _LazyTLSSync(httpx.BaseTransport):
    """The https:// transport of a sync client, made at its first use."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._inner: httpx.HTTPTransport | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self._inner is None:
            self._inner = httpx.HTTPTransport(verify=_tls_context(), trust_env=False, limits=self._limits)
        return self._inner.handle_request(request)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()


def _timeout(connect_timeout_s: float, read_timeout_s: float) -> httpx.Timeout:
    return httpx.Timeout(read_timeout_s, connect=connect_timeout_s, write=read_timeout_s, pool=connect_timeout_s)


def _headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    return {"accept-encoding": "identity"} | dict(headers or {})


def async_client(*, transport: httpx.AsyncBaseTransport | None = None,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
                 headers: Mapping[str, str] | None = None,
                 limits: httpx.Limits | None = None) -> httpx.AsyncClient:
    """An async client for the bounded helpers below; close it (``aclose`` or ``async with``)."""
    limits = limits or httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S)
    # verify=False only reaches the http:// transport, which never speaks TLS; https:// goes
    # through its own verifying transport.  An injected transport carries everything.
    mounts: dict[str, httpx.AsyncBaseTransport | None] | None = (
        None if transport is not None else {"https://": _LazyTLS(limits)})
    return httpx.AsyncClient(transport=transport, mounts=mounts, verify=False, limits=limits,
                             timeout=_timeout(connect_timeout_s, read_timeout_s), follow_redirects=False,
                             trust_env=False, headers=_headers(headers))


def sync_client(*, transport: httpx.BaseTransport | None = None,
                connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
                headers: Mapping[str, str] | None = None,
                limits: httpx.Limits | None = None) -> httpx.Client:
    """A sync client for the bounded helpers below; close it (``close`` or ``with``)."""
    limits = limits or httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S)
    mounts: dict[str, httpx.BaseTransport | None] | None = (
        None if transport is not None else {"https://": _LazyTLSSync(limits)})
    return httpx.Client(transport=transport, mounts=mounts, verify=False, limits=limits,
                        timeout=_timeout(connect_timeout_s, read_timeout_s), follow_redirects=False,
                        trust_env=False, headers=_headers(headers))


# -- reading an answer within its bounds -------------------------------------------------------


def _declared_over(response: httpx.Response, url: str, max_bytes: int) -> None:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise PeerRefused(url, response.status_code, f"Content-Length {declared} is over {max_bytes} bytes",
                          oversize=True)


def _detail(head: bytes) -> str:
    """A short, one-line, printable excerpt of a refusal's body."""
    text = " ".join(head[:DETAIL_BYTES].decode("utf-8", "replace").split())
    return "".join(ch if ch.isprintable() else " " for ch in text)[:DETAIL_CHARS]


def _over(url: str, status: int, max_bytes: int) -> PeerRefused:
    return PeerRefused(url, status, f"the body is over {max_bytes} bytes", oversize=True)


def _failure(url: str, exc: httpx.HTTPError) -> HttpFailure:
    if isinstance(exc, httpx.TimeoutException):
        return TransportFailure(url, "timeout", str(exc) or type(exc).__name__)
    if isinstance(exc, httpx.DecodingError):
        return PeerRefused(url, 0, f"the body cannot be decoded: {exc}")
    return TransportFailure(url, "unreachable", f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)


async def request_bounded(client: httpx.AsyncClient, method: str, url: str, *, max_bytes: int,
                          total_timeout_s: float, content: bytes | None = None,
                          headers: Mapping[str, str] | None = None,
                          accept: Container[int] = (200,)) -> Answer:
    """One request, its answer read whole within ``total_timeout_s`` and ``max_bytes``.

    Raises ``PeerRefused`` for a status not in ``accept`` or a body over the cap, and
    ``TransportFailure`` when the network fails or the deadline passes.
    """
    try:
        with trio.fail_after(total_timeout_s):
            async with client.stream(method, url, content=content, headers=headers) as response:
                if response.status_code not in accept:
                    head = bytearray()
                    async for chunk in response.aiter_bytes():
                        head += chunk
                        if len(head) >= DETAIL_BYTES:
                            break
                    raise PeerRefused(url, response.status_code, _detail(bytes(head)))
                _declared_over(response, url, max_bytes)
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        raise _over(url, response.status_code, max_bytes)
                return Answer(response.status_code, response.headers, bytes(body))
    except trio.TooSlowError:
        raise TransportFailure(url, "timeout", f"no complete answer within {total_timeout_s:g} s") from None
    except httpx.HTTPError as exc:
        raise _failure(url, exc) from None


async def post_bounded(client: httpx.AsyncClient, url: str, content: bytes, *, max_bytes: int,
                       total_timeout_s: float, headers: Mapping[str, str] | None = None,
                       accept: Container[int] = (200,)) -> Answer:
    return await request_bounded(client, "POST", url, content=content, headers=headers, max_bytes=max_bytes,
                                 total_timeout_s=total_timeout_s, accept=accept)


async def get_bounded(client: httpx.AsyncClient, url: str, *, max_bytes: int, total_timeout_s: float,
                      headers: Mapping[str, str] | None = None, accept: Container[int] = (200,)) -> Answer:
    return await request_bounded(client, "GET", url, headers=headers, max_bytes=max_bytes,
                                 total_timeout_s=total_timeout_s, accept=accept)


def request_bounded_sync(client: httpx.Client, method: str, url: str, *, max_bytes: int, total_timeout_s: float,
                         content: bytes | None = None, headers: Mapping[str, str] | None = None,
                         accept: Container[int] = (200,)) -> Answer:
    """``request_bounded`` for a sync client: the deadline is checked between chunks, and each
    connect and read waits at most the whole deadline, so the call ends within twice the deadline."""
    deadline = time.monotonic() + total_timeout_s
    base = client.timeout
    left = total_timeout_s
    timeout = httpx.Timeout(connect=min(base.connect or left, left), read=min(base.read or left, left),
                            write=min(base.write or left, left), pool=min(base.pool or left, left))

    def check() -> None:
        if time.monotonic() > deadline:
            raise TransportFailure(url, "timeout", f"no complete answer within {total_timeout_s:g} s")

    try:
        with client.stream(method, url, content=content, headers=headers, timeout=timeout) as response:
            if response.status_code not in accept:
                head = bytearray()
                for chunk in response.iter_bytes():
                    head += chunk
                    if len(head) >= DETAIL_BYTES:
                        break
                    check()
                raise PeerRefused(url, response.status_code, _detail(bytes(head)))
            _declared_over(response, url, max_bytes)
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise _over(url, response.status_code, max_bytes)
                check()
            check()
            return Answer(response.status_code, response.headers, bytes(body))
    except httpx.HTTPError as exc:
        raise _failure(url, exc) from None


def post_bounded_sync(client: httpx.Client, url: str, content: bytes, *, max_bytes: int, total_timeout_s: float,
                      headers: Mapping[str, str] | None = None, accept: Container[int] = (200,)) -> Answer:
    return request_bounded_sync(client, "POST", url, content=content, headers=headers, max_bytes=max_bytes,
                                total_timeout_s=total_timeout_s, accept=accept)


def get_bounded_sync(client: httpx.Client, url: str, *, max_bytes: int, total_timeout_s: float,
                     headers: Mapping[str, str] | None = None, accept: Container[int] = (200,)) -> Answer:
    return request_bounded_sync(client, "GET", url, headers=headers, max_bytes=max_bytes,
                                total_timeout_s=total_timeout_s, accept=accept)
