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
- redirects are not followed.

Proxies: a gossip call never goes through one (``async_client``): a peer's address is where
the bytes go, and peers are mostly on the LAN.  The calls that leave for a service the owner
named, a commons or a directory (``sync_client(proxy_from_env=True)``), honour the
environment as curl does: ``https_proxy``/``HTTPS_PROXY`` for https:// URLs,
``http_proxy``/``HTTP_PROXY`` for http:// ones, else ``all_proxy``/``ALL_PROXY`` (lower case
first), except for the hosts ``no_proxy``/``NO_PROXY`` lists (``env_proxy`` says how); and a
loopback or LAN host (``localhost``, ``*.local``, a loopback, private or link-local address)
is always reached directly, whatever the environment says, since a proxy cannot reach it.

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
import ipaddress
import logging
import os
import ssl
import sys
import time
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Final, Literal

# `import httpx` also imports httpx's own command line (httpx._main: click, rich and pygments) wherever
# those happen to be installed, as they are beside pytest and the MCP SDK: about 2.8 MB resident in a
# daemon that has gossiped, for a program no Neverest process runs (the `httpx` script is a process of its
# own).  Marked absent before httpx loads, httpx takes its documented fallback (a `main` that says how to
# install the CLI); nothing else of httpx imports it.  No effect once httpx is loaded.
if "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "not importable", by design

import httpx  # after the lines above, on purpose
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
def tls_context() -> ssl.SSLContext:
    """The one verifying TLS context of this process.  Loading the CA bundle costs about 50 ms: once per
    process, and only when an https:// URL is actually called."""
    return httpx.create_ssl_context()


_tls_context = tls_context  # the name it had before the proxy used it



class _LazyTLS(httpx.AsyncBaseTransport):
    """The https:// transport of an async client, made (and the CA bundle loaded) at its first use."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._inner: httpx.AsyncHTTPTransport | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._inner is None:
            self._inner = httpx.AsyncHTTPTransport(verify=tls_context(), trust_env=False, limits=self._limits)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        if self._inner is not None:
            await self._inner.aclose()


class _LazyPlain(httpx.AsyncBaseTransport):
    """The http:// transport of an async client, made at its first use: making httpx's async transport
    loads httpcore's async side (measured 160 ms and 7 MB resident on the 2-core VM), which a daemon
    that is answering its first /healthz, or that has no peer to call, does not need yet."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._inner: httpx.AsyncHTTPTransport | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._inner is None:
            # verify=False: this transport only ever carries http://, which never speaks TLS.
            self._inner = httpx.AsyncHTTPTransport(verify=False, trust_env=False, limits=self._limits)
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
            self._inner = httpx.HTTPTransport(verify=tls_context(), trust_env=False, limits=self._limits)
        return self._inner.handle_request(request)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()


# -- the environment's proxy -------------------------------------------------------------------


# The LAN's addresses (RFC 1918, IPv6 unique local, RFC 4193), beside loopback and link-local ones.
_LAN: Final = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"))


def is_local_host(host: str) -> bool:
    """Whether ``host`` is this machine or its LAN, which no proxy is asked to reach: ``localhost``,
    a ``.localhost`` or ``.local`` (zeroconf) name, or a loopback, LAN or link-local address."""
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith((".localhost", ".local")):
        return True
    try:
        ip = ipaddress.ip_address(name.partition("%")[0])  # an IPv6 zone (fe80::1%eth0) names no other host
    except ValueError:
        return False
    return ip.is_loopback or ip.is_link_local or any(ip in net for net in _LAN if net.version == ip.version)


def _no_proxy(host: str, listed: str) -> bool:
    """Whether NO_PROXY's ``listed`` hosts take ``host`` out of the proxy: ``*``; a name and its
    subdomains (``example.com``, ``.example.com`` and ``*.example.com`` alike); an IP address or a CIDR
    range.  A port given with an entry is ignored."""
    name = host.strip("[]").lower().rstrip(".")
    for raw in listed.split(","):
        entry = raw.strip().lower()
        if entry == "*":
            return True
        if entry.startswith("["):
            entry = entry[1:].partition("]")[0]
        elif entry.count(":") == 1:
            entry = entry.partition(":")[0]
        if not entry:
            continue
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            entry = entry.removeprefix("*").lstrip(".").rstrip(".")
            if entry and (name == entry or name.endswith("." + entry)):
                return True
            continue
        try:
            if ipaddress.ip_address(name) in network:
                return True
        except ValueError:
            continue
    return False


def _env(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name.lower()) or environ.get(name.upper()) or ""


def env_proxy(url: str | httpx.URL, environ: Mapping[str, str] | None = None) -> str | None:
    """The proxy the environment names for ``url``, or None for a direct call (see the module docstring)."""
    environ = os.environ if environ is None else environ
    target = httpx.URL(url) if isinstance(url, str) else url
    if is_local_host(target.host) or _no_proxy(target.host, _env(environ, "no_proxy")):
        return None
    proxy = _env(environ, f"{target.scheme}_proxy") or _env(environ, "all_proxy")
    if not proxy.strip():
        return None
    return proxy.strip() if "://" in proxy else "http://" + proxy.strip()


class _EnvProxied(httpx.BaseTransport):
    """A sync client's transport that sends each request direct, or through the proxy the environment
    (read when the client is made) names for its URL: one client may call a LAN host and a distant one."""

    def __init__(self, limits: httpx.Limits, environ: Mapping[str, str]) -> None:
        self._limits = limits
        self._environ = dict(environ)
        self._plain = httpx.HTTPTransport(verify=False, trust_env=False, limits=limits)  # never speaks TLS
        self._tls = _LazyTLSSync(limits)
        self._proxied: dict[str, httpx.HTTPTransport] = {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        proxy = env_proxy(request.url, self._environ)
        if proxy is None:
            direct = self._tls if request.url.scheme == "https" else self._plain
            return direct.handle_request(request)
        if proxy not in self._proxied:
            # TLS to the target through a CONNECT tunnel (or to an https:// proxy) is verified as always.
            self._proxied[proxy] = httpx.HTTPTransport(proxy=proxy, verify=tls_context(), trust_env=False,
                                                       limits=self._limits)
        return self._proxied[proxy].handle_request(request)

    def close(self) -> None:
        for transport in (self._plain, self._tls, *self._proxied.values()):
            transport.close()


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
    plain = transport if transport is not None else _LazyPlain(limits)
    return httpx.AsyncClient(transport=plain, mounts=mounts, verify=False, limits=limits,
                             timeout=_timeout(connect_timeout_s, read_timeout_s), follow_redirects=False,
                             trust_env=False, headers=_headers(headers))


def sync_client(*, transport: httpx.BaseTransport | None = None,
                connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
                headers: Mapping[str, str] | None = None,
                limits: httpx.Limits | None = None,
                proxy_from_env: bool = False, environ: Mapping[str, str] | None = None) -> httpx.Client:
    """A sync client for the bounded helpers below; close it (``close`` or ``with``).

    ``proxy_from_env``: calls to hosts beyond the LAN go through the proxy ``environ`` (default:
    this process's environment) names, as the module docstring says."""
    limits = limits or httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S)
    if transport is None and proxy_from_env:
        transport = _EnvProxied(limits, os.environ if environ is None else environ)
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
