"""The proxy: a loopback front door for every model (``neverestctl proxy``, or the daemon's ``proxy_listen``).

An ASGI app, served by hypercorn's trio worker, that speaks the OpenAI-style ``POST /v1/chat/completions``
and the Anthropic-style ``POST /v1/messages`` (``chat_formats``), JSON and streamed (Server-Sent Events),
and forwards each request to the upstream its model's name picks (``Routes``: the longest matching
prefix, ``*`` for every other model).  Any other ``/v1/...`` path goes to the ``*`` route as it is.

**Without ``x-neverest-project``** a request is a pure pass-through: its body is sent upstream byte for
byte with the client's headers (``authorization`` and ``x-api-key`` included; only the hop-by-hop ones
and ``host`` are not forwarded), and the answer comes back as it left the upstream, status, headers and
bytes (compressed or not), each chunk passed on as it arrives.  Nothing of it is logged or stored.

**With ``x-neverest-project: <project folder or name>``** (and optionally ``x-neverest-session``) the
proxy also, around the same forwarding:

1. reads the project's log (``neverest.relay``): when the request's model is not the one that last
   wrote it, the handoff (recent work, corrections, deploys) is added to the request as a system
   message (OpenAI: after the client's own system messages; Anthropic: after its ``system``); when it
   is, the corrections and deploys alone, if any.  The lessons the person's last words bear on are
   added too, chosen and framed as the hook frames them (``bearing_on``);
2. appends the person's last words to the log (kind ``correction`` when they correct the model, by
   the session reader's rule, ``detect.is_correction``) and, once the answer has passed, the reply
   (assembled from the stream as it passed, or read from the JSON answer);
3. hands the end of the conversation and the reply to the session reader's ``Detector`` and stores
   what it finds (the conversation's note, corrections, failed tool calls, surprises after them)
   through the one ingest function, as agent ``proxy``.  The session is ``x-neverest-session``, else
   a hash of the project and the conversation's first words (every request of a conversation carries
   them).  Upstream answers are asked for uncompressed (``accept-encoding: identity``) so the reply can
   be read as it passes.

The ``x-neverest-*`` headers are never forwarded.  Beside the model routes, JSON for other programs:
``POST /memory/remember`` (one event, or a list), ``POST /memory/recall`` (``{"query", "k"}``),
``GET /memory/relay?project=P[&limit=N]`` (the handoff) and ``POST /memory/relay`` (``{"project", "text",
"kind", "model"}``: a line), and ``GET /healthz``.

Bounds: a request body over ``max_body_bytes`` is refused (413) before it is held, and must arrive
within ``BODY_TIMEOUT_S`` (408); every upstream call has a connect timeout and a total deadline
(``timeout_s``, from the request to the answer's last byte: 504 before the answer starts, the answer cut
after); of an answer the proxy holds only what it reads (``MAX_READ_BYTES`` of a JSON answer, a bounded
line of a stream).  An upstream's own errors (4xx, 5xx) pass through unchanged; the proxy's are JSON in
the route's format, with ``type`` ``neverest_proxy``: 404 no route, 413, 408, 502 unreachable, 504.
Whatever goes wrong with the log or the memory never fails the model call: it is logged and skipped.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from hashlib import blake2b
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs

import httpcore
import httpx
import trio

from neverest import httpclient, relay
from neverest.agents import chat_formats as formats
from neverest.agents.chats import session_of
from neverest.agents.transcripts import Turn
from neverest.clock import Clock
from neverest.config import Config, ProxySection, parse_route
from neverest.serving import BodyRefused, ClientGone, handled_by_server, read_body, serve_asgi

log = logging.getLogger("neverest.proxy")

PROJECT_HEADER: Final = b"x-neverest-project"
SESSION_HEADER: Final = b"x-neverest-session"
AGENT: Final = "proxy"
BODY_TIMEOUT_S: Final = 60.0
MAX_READ_BYTES: Final = 8 * 1024 * 1024  # of a JSON answer, read to find its text (the rest still passes)
MAX_MEMORY_BODY_BYTES: Final = 1024 * 1024  # a /memory/* request
MAX_RECALL: Final = 50
MAX_NOTED_SESSIONS: Final = 4096  # sessions whose note was stored, remembered so as not to send it again
# Headers that belong to one connection (RFC 9110 §7.6.1), and those the proxy sets itself.
HOP_BY_HOP: Final = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"proxy-authenticate",
                               b"proxy-authorization", b"te", b"trailer", b"transfer-encoding", b"upgrade",
                               b"host", b"content-length", b"expect"})
ANSWER_DROPPED: Final = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding",
                                   b"upgrade", b"trailer"})

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]


# -- routes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Routes:
    """Model-name prefixes to upstream base URLs; the longest prefix wins, ``*`` takes the rest."""

    pairs: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, items: Iterable[str]) -> Routes:
        """From ``prefix=url`` items (the ``routes`` setting).  Raises ConfigError."""
        found: dict[str, str] = {}
        for item in items:
            prefix, url = parse_route(item)
            found[prefix] = url
        return cls(tuple(sorted(found.items(), key=lambda pair: -len(pair[0]))))

    @property
    def default(self) -> str | None:
        return next((url for prefix, url in self.pairs if prefix == "*"), None)

    def upstream(self, model: str | None) -> str | None:
        if model is not None:
            for prefix, url in self.pairs:
                if prefix != "*" and model.startswith(prefix):
                    return url
        return self.default

    def needs_model(self) -> bool:
        """Whether the model must be read from a body to choose (more than one upstream)."""
        return len({url for _, url in self.pairs}) > 1 or self.default is None


def upstream_url(base: str, path: str, query: bytes) -> str:
    """The request's path on ``base``; a base ending in ``/v1`` is not doubled by a ``/v1/...`` path."""
    if base.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
        base = base[:-3]
    return base + path + (f"?{query.decode('latin-1')}" if query else "")


# -- the memory, as the proxy reaches it -------------------------------------------------------------


@dataclass
class MemoryDoor:
    """How the proxy reaches the memory: ``read`` runs a function of the memory service
    (``neverest.memory.service.Memory``) off the event loop, ``store`` stores events through the one
    ingest function (the daemon's worker, or the daemon over its socket, or the store here: ``home_door``),
    and the project logs live in ``home``."""

    home: Path
    clock: Clock
    read: Callable[[Callable[[Any], Any]], Awaitable[Any]]
    store: Callable[[list[dict[str, Any]]], Awaitable[dict[str, Any]]]

    async def remember(self, events: list[Any]) -> dict[str, Any]:
        return await self.store(events)

    async def recall(self, query: str, k: int) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = await self.read(lambda memory: recall_json(memory, query, k))
        return found

    async def bearing_on(self, text: str, cwd: str) -> str:
        """The lessons ``text`` bears on, framed; '' when none, or when the memory cannot be read (logged):
        the model call goes on without them."""
        if not text.strip():
            return ""
        try:
            found: str = await self.read(lambda memory: bearing_on(memory, text, cwd))
        except Exception as exc:  # a locked or broken store never fails a model call
            log.warning("the lessons could not be read: %s: %s", type(exc).__name__, exc)
            return ""
        return found


def home_door(home: Path, config: Config, clock: Clock) -> MemoryDoor:
    """The memory of ``home`` reached from a process of its own (``neverestctl proxy``): reads open the
    store in a worker thread; events go to the daemon over its control socket when one runs (it is the
    home's one writer), else to the store here, one write at a time."""
    from neverest.client import ask_daemon
    from neverest.memory.service import Memory

    writing = trio.Lock()

    def call(fn: Callable[[Any], Any]) -> Any:
        with Memory.open(home, config, clock) as memory:
            return fn(memory)

    async def read(fn: Callable[[Any], Any]) -> Any:
        return await trio.to_thread.run_sync(call, fn)

    def through_daemon(events: list[dict[str, Any]]) -> dict[str, Any] | None:
        answer = ask_daemon(home, {"op": "remember", "events": events}, timeout_s=30.0)
        return None if answer is None else dict(answer["result"])

    async def store(events: list[dict[str, Any]]) -> dict[str, Any]:
        answered = await trio.to_thread.run_sync(through_daemon, events)
        if answered is not None:
            return answered
        async with writing:
            result: dict[str, Any] = await trio.to_thread.run_sync(call, lambda m: m.ingest(events).to_json())
            return result

    return MemoryDoor(home, clock, read, store)


def recall_json(memory: Any, query: str, k: int) -> list[dict[str, Any]]:
    """Recall's hits as the proxy answers them: the ``recall`` operation's, as the MCP server, the bridge
    and the API give them (a lesson through the one read model, an episode as what happened, each framed)."""
    from neverest.agents import operations

    results: list[dict[str, Any]] = operations.recall(memory, query, k)["results"]
    return results


def bearing_on(memory: Any, text: str, cwd: str, *, top: int = 3) -> str:
    """The lessons ``text`` bears on, as the hook gives them for a prompt: chosen by the hook's rule (key
    terms shared, then cosine, in the configured model's space when there is one), only this memory's own
    and received ones that are ``common`` (one state rule: ``views``), framed by the hook's ``frame`` under
    its header; '' when none.  Unlike the hook, nothing is held out or given once per session: the
    proxy's addition is not kept in the client's history, so each request is told again what bears on it."""
    import time

    from neverest.agents import hook, hook_model
    from neverest.memory import views
    from neverest.memory.queries import injections as q

    store, config, now = memory.store, memory.config, memory.clock.now()
    model = None
    if config.embed_url and config.embed_model and memory.home is not None:
        model = hook_model.ModelQuery(config.embed_url, config.embed_model,
                                      latch=memory.home / hook_model.LATCH_FILE, now=now)
    db = store.db
    with store.read():
        groups = hook.rank("UserPromptSubmit", q.candidates(db), {"prompt": text[:hook.MAX_QUERY_CHARS], "cwd": cwd},
                           model=model, deadline=time.monotonic() + hook.DEADLINE_S)[:4 * top]
        if not groups:
            return ""
        published = q.published(db, (g[0].hash for g in groups))
        labels = {g[0].hash: views.state_label(own=g[0].origin == "", recorded=g[0].hash in published)
                  for g in groups}
        needing = {digest for digest, label in labels.items() if label is None}
        states = views.judge(db, needing, now=now, config=config, own_origin=memory.identity.origin) \
            if needing else {}
        lines: list[str] = []
        size = len(hook.HEADER)
        for group in groups:
            own = group[0].origin == ""
            state = labels[group[0].hash] or states[group[0].hash][0]
            if not ((own and state != "revoked") or (not own and state == "common")):
                continue
            line = hook.frame(group, state, q.other_origins(db, group[0].hash))
            if size + 1 + len(line) > hook.MAX_CONTEXT_CHARS:
                break
            lines.append(line)
            size += 1 + len(line)
            if len(lines) == top:
                break
    return "\n".join([hook.HEADER, *lines]) if lines else ""


UPSTREAM_ERRORS: Final = (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError,
                          httpcore.UnsupportedProtocol, httpcore.ProxyError)


@dataclass(frozen=True)
class _Upstream:
    """One route's upstream, parsed once: where to connect, what ``host`` to send, the path prefix."""

    scheme: bytes
    host: bytes
    port: int
    netloc: bytes  # host[:port] as the URL gives it: the ``host`` header a client would send
    prefix: str  # the base URL's path
    pool: httpcore.AsyncConnectionPool | httpcore.AsyncHTTPProxy


class Upstreams:
    """The connections to the upstreams: one pool of kept-alive connections (httpcore's, below httpx:
    no layer between the client's headers and the wire, and 0.4 ms of CPU less per call, measured), a
    connect timeout and an idle-read timeout (the total deadline is the app's), no redirects followed, no
    header of its own but ``host`` and ``content-length``; an upstream beyond the LAN is reached through the
    proxy the environment names for it, as curl would (``httpclient.env_proxy``)."""

    def __init__(self, section: ProxySection, routes: Routes, environ: Mapping[str, str] | None = None) -> None:
        tls = httpclient.tls_context() if any(url.startswith("https:") for _, url in routes.pairs) else None
        pooling: dict[str, Any] = {"max_connections": 256, "max_keepalive_connections": 64,
                                   "keepalive_expiry": httpclient.KEEPALIVE_EXPIRY_S, "ssl_context": tls}
        self.direct = httpcore.AsyncConnectionPool(**pooling)
        self.through: dict[str, httpcore.AsyncHTTPProxy] = {}  # one pool per proxy the environment names
        self.targets: dict[str, _Upstream] = {}
        for _, base in routes.pairs:
            url = httpx.URL(base)
            proxy = httpclient.env_proxy(url, environ)
            pool: httpcore.AsyncConnectionPool | httpcore.AsyncHTTPProxy = self.direct
            if proxy is not None:
                pool = self.through.setdefault(proxy, httpcore.AsyncHTTPProxy(proxy_url=proxy, **pooling))
            port = url.port or (443 if url.scheme == "https" else 80)
            self.targets[base] = _Upstream(url.scheme.encode("ascii"), url.raw_host, port,
                                           url.netloc, url.path.rstrip("/"), pool)
        self.timeouts = {"connect": section.connect_timeout_s, "read": section.timeout_s,
                         "write": section.timeout_s, "pool": section.connect_timeout_s}

    async def start(self, method: str, base: str, path: str, query: bytes, headers: Headers, body: bytes
                    ) -> httpcore.Response:
        """The upstream's answer to one request to ``path`` on the route ``base``, its body not read yet
        (``aiter_stream``, then ``aclose``)."""
        up = self.targets[base]
        target = upstream_url(up.prefix, path, query).encode("latin-1")
        sent = [(b"host", up.netloc), *headers, (b"content-length", str(len(body)).encode("ascii"))]
        request = httpcore.Request(method.encode("ascii"), httpcore.URL(scheme=up.scheme, host=up.host, port=up.port,
                                                                        target=target or b"/"),
                                   headers=sent, content=body, extensions={"timeout": self.timeouts})
        return await up.pool.handle_async_request(request)

    async def aclose(self) -> None:
        for pool in (self.direct, *self.through.values()):
            await pool.aclose()


# -- the app ---------------------------------------------------------------------------------------


class Refused(Exception):
    """The proxy itself refuses a request: ``status``, a ``code`` and a message for the client."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass
class Exchange:
    """What the proxy keeps of one request that names a project, to write once the answer has passed."""

    project: str
    model: str
    fmt: str
    session: str
    turns: list[Turn]  # the end of the conversation, as the detectors read it
    noted: bool  # the conversation's note was stored before
    said: str  # the person's last words ('' when the last message is not theirs)
    said_kind: str  # "user", or "correction"
    at: datetime
    said_written: trio.Event = field(default_factory=trio.Event)


@dataclass
class ProxyApp:
    routes: Routes
    door: MemoryDoor
    upstreams: Upstreams
    timeout_s: float = 600.0
    max_body_bytes: int = 32 * 1024 * 1024
    body_timeout_s: float = BODY_TIMEOUT_S
    index: relay.LogIndex = field(default_factory=relay.LogIndex)  # the project logs, read incrementally
    _noted: dict[str, None] = field(default_factory=dict)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if await handled_by_server(scope, receive, send):
            return
        path: str = scope["path"]
        fmt = formats.PATHS.get(path, formats.OPENAI)
        try:
            if path == "/healthz" and scope["method"] == "GET":
                await _json(send, 200, {"ok": True})
            elif path.startswith("/memory/"):
                await self._memory(scope, receive, send)
            elif path == "/v1" or path.startswith("/v1/"):
                await self._model(scope, receive, send, fmt)
            else:
                raise Refused(404, "not_found", f"no route {path}: the proxy serves /v1/... and /memory/...")
        except Refused as refused:
            await _error(send, fmt, refused)
        except _ClientGone:
            pass

    # -- the model routes ----------------------------------------------------------------------------

    async def _model(self, scope: Scope, receive: Receive, send: Send, fmt: str) -> None:
        headers: Headers = scope["headers"]
        body = await _read_body(receive, headers, self.max_body_bytes, self.body_timeout_s)
        project = _header(headers, PROJECT_HEADER)
        parsed: dict[str, Any] | None = None
        if project or (self.routes.needs_model() and scope["method"] == "POST"):
            parsed = _object(body)
        model = parsed.get("model") if parsed is not None else None
        model = model if isinstance(model, str) else None
        base = self.routes.upstream(model)
        if base is None:
            raise Refused(404, "no_route", f"no route for the model {model!r}: add one to routes (prefix=url, "
                                           "or *=url for every model)")
        exchange: Exchange | None = None
        if project and parsed is not None and model and scope["path"] in formats.PATHS:
            body, exchange = await self._before(project, _header(headers, SESSION_HEADER), model, fmt, parsed, body)
        forwarded = [(k, v) for k, v in headers if k not in HOP_BY_HOP and not k.startswith(b"x-neverest-")]
        if exchange is not None:
            forwarded = [(k, v) for k, v in forwarded if k != b"accept-encoding"] + [(b"accept-encoding", b"identity")]
        try:
            reply = await self._forward(scope, receive, send, base, forwarded, body, exchange)
        except Refused:
            if exchange is not None:  # the person's words still count, whatever the upstream did
                await self._after(exchange, None)
            raise
        if exchange is not None:
            await self._after(exchange, reply)

    async def _forward(self, scope: Scope, receive: Receive, send: Send, base: str, headers: Headers, body: bytes,
                       exchange: Exchange | None) -> str | None:
        """Send the request upstream and its answer back as it comes; the reply's text when an exchange
        wants it (None when the answer was not a success).  A client that goes away ends the call: the
        upstream stops generating for nobody."""
        answered = _Answered()
        refused: Refused | None = None
        with trio.move_on_after(self.timeout_s) as deadline:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_when_gone, receive, nursery.cancel_scope)
                if exchange is not None:
                    if exchange.said:
                        # Not cancelled with the call (_log_said shields its write): the words are the person's.
                        nursery.start_soon(self._log_said, exchange)
                    else:
                        exchange.said_written.set()
                try:
                    await self._relay_answer(scope, send, base, headers, body, exchange, answered)
                except Refused as exc:  # raised out of the nursery, not inside an exception group
                    refused = exc
                nursery.cancel_scope.cancel()
        if refused is not None:
            raise refused
        if deadline.cancelled_caught:
            if not answered.started:
                raise Refused(504, "upstream_timeout",
                              f"no answer from {_host(base)} within {self.timeout_s:g} s (proxy_timeout_s)")
            log.info("the answer from %s was cut at the %g s deadline", _host(base), self.timeout_s)
            return None
        return answered.reply

    async def _relay_answer(self, scope: Scope, send: Send, base: str, headers: Headers, body: bytes,
                            exchange: Exchange | None, answered: _Answered) -> None:
        try:
            response = await self.upstreams.start(scope["method"], base, scope["path"], scope.get("query_string", b""),
                                                  headers, body)
        except httpcore.TimeoutException:
            raise Refused(504, "upstream_timeout", f"the upstream did not answer in time ({_host(base)})") from None
        except UPSTREAM_ERRORS as exc:
            raise Refused(502, "upstream_unreachable", f"the upstream cannot be reached ({_host(base)}): "
                                                        f"{type(exc).__name__}") from None
        try:
            answer = [(k.lower(), v) for k, v in response.headers if k.lower() not in ANSWER_DROPPED]
            await send({"type": "http.response.start", "status": response.status, "headers": answer})
            answered.started = True
            reader = _ReplyReader(exchange.fmt, answer) if exchange is not None and response.status == 200 else None
            length = next((int(v) for k, v in answer if k == b"content-length" and v.isdigit()), None)
            # The person's words and the reply are written to the log before the client sees its answer end,
            # so that the client's next request finds them there (an error answer too: its words were said):
            # the last chunk of an answer of known length is held until then.
            hold = exchange is not None and length is not None
            held = b""
            passed = 0
            ended = False
            async for chunk in response.aiter_stream():
                passed += len(chunk)
                if reader is not None:
                    reader.feed(chunk)
                if hold:
                    chunk, held = held, chunk
                    if chunk:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                else:
                    # The whole of an answer of known length ends it at once, without one more message.
                    ended = passed == length
                    await send({"type": "http.response.body", "body": chunk, "more_body": not ended})
            if reader is not None and exchange is not None:
                answered.reply = reader.text()
                await self._log_reply(exchange, answered.reply)
            elif exchange is not None:
                await exchange.said_written.wait()
            if not ended:
                await send({"type": "http.response.body", "body": held, "more_body": False})
        except UPSTREAM_ERRORS as exc:
            log.info("the answer from %s broke off: %s", _host(base), type(exc).__name__)
            if not answered.started:
                raise Refused(502, "upstream_broken", f"the upstream's answer broke off ({_host(base)})") from None
            # The answer started: it can only be cut; the client sees it end early.
        finally:
            with trio.CancelScope(shield=True):
                await response.aclose()

    async def _before(self, project: str, session: str, model: str, fmt: str, parsed: dict[str, Any],
                      body: bytes) -> tuple[bytes, Exchange]:
        """The request with the log's handoff and the lessons added (read side by side), and what to write
        once the call is on its way.  Never raises for the log or the memory: the call goes on without."""
        from neverest.agents.detect import is_correction
        from neverest.agents.transcripts import person_words

        home, name = self.door.home, relay.project_name(project)
        said = person_words(formats.last_user_text(parsed))
        handoff: relay.Handoff | None = None
        lessons = ""

        async def read_log() -> None:
            nonlocal handoff
            try:
                handoff = await trio.to_thread.run_sync(self.index.handoff_data, home, project)
            except (OSError, ValueError) as exc:
                log.warning("project %s: the project log cannot be read: %s", name, exc)

        async def find_lessons() -> None:
            nonlocal lessons
            lessons = await self.door.bearing_on(said, name)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_log)
            if said:
                nursery.start_soon(find_lessons)
        if handoff is not None:
            changed = handoff.last_model is not None and handoff.last_model != model
            added = "\n\n".join(part for part in (handoff.text(work=changed), lessons) if part)
        else:
            added = lessons
        if added:
            body = json.dumps(formats.with_system(fmt, parsed, added), ensure_ascii=False).encode("utf-8")
        if not session:
            first = formats.first_user_text(parsed)
            session = blake2b(f"{name}\x1f{first}".encode("utf-8", "replace"), digest_size=8).hexdigest()
        session = session[:256]
        return body, Exchange(project=project, model=model, fmt=fmt, session=session,
                              turns=session_of(formats.tail(parsed), fmt), noted=session in self._noted,
                              said=said, said_kind="correction" if said and is_correction(said) else "user",
                              at=self.door.clock.now())

    async def _log_said(self, exchange: Exchange) -> None:
        """The person's words written to the log while the call is on its way (the reply waits for them)."""
        try:
            # Shielded: the call's nursery is cancelled as soon as the answer has passed (an upstream error
            # passes at once), and a cancelled task that had not reached its thread yet would drop the words.
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_append_said, self.door.home, exchange.project, exchange.model,
                                              exchange.said_kind, exchange.said, exchange.at)
        except (OSError, ValueError) as exc:
            log.warning("project %s: the person's words could not be written to the project log: %s",
                        exchange.project, exc)
        finally:
            exchange.said_written.set()

    async def _log_reply(self, exchange: Exchange, reply: str) -> None:
        await exchange.said_written.wait()  # the person's words first
        if not reply:
            return
        now = self.door.clock.now()
        try:
            await trio.to_thread.run_sync(lambda: relay.append(
                self.door.home, exchange.project, model=exchange.model, role="assistant", kind="assistant",
                text=reply, now=now))
        except (OSError, ValueError) as exc:
            log.warning("project %s: the reply could not be written to the project log: %s", exchange.project, exc)

    async def _after(self, exchange: Exchange, reply: str | None) -> None:
        """What the session reader finds in the conversation's end (and the reply) stored as events;
        a failure is logged, never raised: the answer has gone out."""
        try:
            await self._store_events(exchange, reply)
        except Exception as exc:  # the memory failing (a locked store, a full disk...) never fails the call
            log.warning("project %s: the events of the call could not be stored: %s: %s", exchange.project,
                        type(exc).__name__, exc)

    async def _store_events(self, exchange: Exchange, reply: str | None) -> None:
        from neverest.agents.detect import Detector

        name = relay.project_name(exchange.project)
        detector = Detector(AGENT, {"session": exchange.session, "cwd": name if name.startswith("/") else "",
                                    "episode": exchange.noted})
        events: list[dict[str, Any]] = []
        for turn in exchange.turns:
            events.extend(detector.turn(turn))
        if reply:
            events.extend(detector.turn(Turn(role="assistant", at=None, text=reply)))
        if not events:
            return
        result = await self.door.remember(events)
        if not exchange.noted and any(e["kind"] == "note" for e in events):
            self._noted[exchange.session] = None
            while len(self._noted) > MAX_NOTED_SESSIONS:
                del self._noted[next(iter(self._noted))]
        if result.get("refused"):
            log.info("project %s: %d event(s) refused", exchange.project, len(result["refused"]))

    # -- the memory routes ---------------------------------------------------------------------------

    async def _memory(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        headers: Headers = scope["headers"]
        query = {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode("latin-1")).items()}
        if method == "POST":
            raw = await _read_body(receive, headers, MAX_MEMORY_BODY_BYTES, self.body_timeout_s)
            try:
                given: Any = json.loads(raw) if raw.strip() else {}
            except (ValueError, RecursionError):
                raise Refused(400, "bad_json", "the body is not JSON") from None
        elif method == "GET":
            given = query
        else:
            raise Refused(405, "method", f"{method} is not served on {path}")
        if path == "/memory/remember" and method == "POST":
            events = given if isinstance(given, list) else [given]
            await _json(send, 200, await self.door.remember(events))
        elif path == "/memory/recall":
            query_text = given.get("query") if isinstance(given, dict) else None
            if not isinstance(query_text, str) or not query_text.strip():
                raise Refused(400, "bad_request", "give the query: {\"query\": \"...\", \"k\": 5}")
            k = _int(given.get("k", 5), "k", 1, MAX_RECALL)
            await _json(send, 200, {"query": query_text, "results": await self.door.recall(query_text[:4096], k)})
        elif path == "/memory/relay":
            if not isinstance(given, dict):
                raise Refused(400, "bad_request", "give a JSON object")
            project = given.get("project") or _header(headers, PROJECT_HEADER)
            if not isinstance(project, str) or not project.strip():
                raise Refused(400, "bad_request", "give the project (project, or the x-neverest-project header)")
            try:
                if method == "GET":
                    limit = _int(given.get("limit", relay.DEFAULT_LIMIT), "limit", 1, 1000)
                    data = await trio.to_thread.run_sync(lambda: relay.handoff_data(self.door.home, project,
                                                                                    limit=limit))
                    await _json(send, 200, data.to_json() | {"text": data.text()})
                    return
                text, kind, model = given.get("text"), given.get("kind", "note"), given.get("model", "")
                if not isinstance(text, str) or not isinstance(kind, str) or not isinstance(model, str):
                    raise Refused(400, "bad_request", "give text (and kind, model) as strings")
                if kind not in ("note", "deploy", "correction"):
                    raise Refused(400, "bad_request", "kind is note, deploy or correction")
                item = relay.entry(project, model=model, role="note", kind=kind, text=text, now=self.door.clock.now())
                await trio.to_thread.run_sync(relay.write_entry, self.door.home, item)
            except relay.RelayError as exc:
                raise Refused(400, "bad_request", str(exc)) from None
            await _json(send, 200, {"written": item.to_json()})
        else:
            raise Refused(404, "not_found", f"no route {method} {path}")


def _append_said(home: Path, project: str, model: str, kind: str, said: str, now: Any) -> None:
    """The person's words, once: a retry of the same request (the log's newest line is the same words to
    the same model) is not written again."""
    newest = next(relay.newest(home, project), None)
    if newest is not None and newest.role == "user" and newest.model == model and \
            newest.text == relay.entry(project, model=model, role="user", kind=kind, text=said, now=now).text:
        return
    relay.append(home, project, model=model, role="user", kind=kind, text=said, now=now)


class _ReplyReader:
    """The reply's text read from an answer as it passes: a stream's events, or a JSON body (bounded)."""

    def __init__(self, fmt: str, headers: Headers) -> None:
        self.fmt = fmt
        kind = next((v.decode("latin-1") for k, v in headers if k == b"content-type"), "")
        self.stream = formats.StreamText(fmt) if "text/event-stream" in kind else None
        self.body = bytearray()
        self.over = False

    def feed(self, chunk: bytes) -> None:
        if self.stream is not None:
            self.stream.feed(chunk)
        elif not self.over:
            self.body += chunk
            if len(self.body) > MAX_READ_BYTES:
                self.body.clear()
                self.over = True

    def text(self) -> str:
        if self.stream is not None:
            return self.stream.text()
        if self.over:
            return ""
        return formats.reply_text(self.fmt, _object(bytes(self.body)))


# -- small helpers ---------------------------------------------------------------------------------


@dataclass
class _Answered:
    started: bool = False  # the answer's status and headers were sent: a refusal can no longer be
    reply: str | None = None


class _ClientGone(Exception):
    """The client went away before its request was read."""


async def _cancel_when_gone(receive: Receive, scope: trio.CancelScope) -> None:
    """Cancel the answer's forwarding when the client disconnects (nobody reads it any more)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


async def _read_body(receive: Receive, headers: Headers, limit: int, timeout_s: float) -> bytes:
    """``serving.read_body``, its refusals as the proxy's."""
    try:
        return await read_body(headers, receive, limit=limit, timeout_s=timeout_s)
    except BodyRefused as refused:
        raise Refused(refused.status, refused.code.replace("-", "_"), refused.message) from None
    except ClientGone:
        raise _ClientGone from None


def _header(headers: Headers, name: bytes) -> str:
    for key, value in headers:
        if key == name:
            try:
                return value.decode("utf-8").strip()
            except UnicodeDecodeError:
                return value.decode("latin-1").strip()
    return ""


def _object(body: bytes) -> dict[str, Any] | None:
    try:
        found = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return found if isinstance(found, dict) else None


def _int(value: object, name: str, low: int, high: int) -> int:
    try:
        number = int(value) if isinstance(value, int | str) and not isinstance(value, bool) else math.nan
    except ValueError:
        number = math.nan
    if not isinstance(number, int) or not low <= number <= high:
        raise Refused(400, "bad_request", f"{name} is a whole number from {low} to {high}")
    return number


def _host(url: str) -> str:
    """Where a call went, for messages and the log: the scheme and host, never the path or query."""
    parsed = httpx.URL(url)
    return f"{parsed.scheme}://{parsed.host}" + (f":{parsed.port}" if parsed.port else "")


async def _json(send: Send, status: int, payload: object) -> None:
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _error(send: Send, fmt: str, refused: Refused) -> None:
    """The proxy's own refusal, in the shape of the route's format."""
    if fmt == formats.ANTHROPIC:
        payload: dict[str, Any] = {"type": "error", "error": {"type": "neverest_proxy", "code": refused.code,
                                                              "message": refused.message}}
    else:
        payload = {"error": {"type": "neverest_proxy", "code": refused.code, "message": refused.message}}
    try:
        await _json(send, refused.status, payload)
    except Exception:  # the answer had started: nothing more can be said
        log.debug("could not send the refusal %s", refused.code)


# -- serving -----------------------------------------------------------------------------------------


async def serve(door: MemoryDoor, section: ProxySection, listen: str, *,
                task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the proxy on ``listen`` until cancelled; reports the bound addresses through ``task_status``."""
    routes = Routes.parse(section.routes)
    upstreams = Upstreams(section, routes)
    try:
        app = ProxyApp(routes, door, upstreams, timeout_s=section.timeout_s, max_body_bytes=section.max_body_bytes)
        await serve_asgi(app, listen, logger="neverest.proxy", server_headers=False, task_status=task_status)
    finally:
        with trio.CancelScope(shield=True):
            await upstreams.aclose()
