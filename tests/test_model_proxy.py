"""The model proxy (neverest/agents/proxy.py) on real sockets on 127.0.0.1, against a fake upstream model
server (tests/fake_upstream.py) speaking both formats, JSON and streamed."""

from __future__ import annotations

import functools
import http.server
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import daemons
import httpx
import pytest
import trio
from fake_upstream import FakeUpstream, openai_json

from neverest import relay
from neverest.agents.proxy import Routes, home_door, serve, upstream_url
from neverest.client import ask
from neverest.clock import FixedClock
from neverest.config import ConfigError, load_config
from neverest.ctl import main
from neverest.memory.service import Memory
from neverest.serving import serve_asgi

SECRET = "sk-test-SECRET-0123456789abcdef"
PROJECT = "/work/src/shop"


@dataclass
class Rig:
    home: Path
    upstream: FakeUpstream
    upstream_url: str
    proxy_url: str
    client: httpx.AsyncClient

    def chat(self, model: str, messages: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
        return {"model": model, "messages": messages, **more}

    async def post(self, path: str, body: dict[str, Any] | bytes, *, project: str | None = PROJECT,
                   headers: dict[str, str] | None = None, to: str | None = None) -> httpx.Response:
        sent = {"authorization": f"Bearer {SECRET}", "x-api-key": SECRET} | (headers or {})
        if project is not None:
            sent["x-neverest-project"] = project
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await self.client.post((to or self.proxy_url) + path, content=content, headers=sent)


async def start(nursery: trio.Nursery, home: Path, **settings: Any) -> Rig:
    home.mkdir(exist_ok=True)
    clock = FixedClock(datetime.now(UTC))
    with Memory.open(home, load_config(home, {}), clock):
        pass  # the store and the key
    upstream = FakeUpstream()
    (up,) = await nursery.start(functools.partial(serve_asgi, upstream, "127.0.0.1:0", logger="test.upstream",
                                                  server_headers=False))
    settings.setdefault("routes", [f"gpt={up}", f"claude={up}/v1"])
    config = load_config(home, {}, **settings)
    (bound,) = await nursery.start(functools.partial(serve, home_door(home, config, clock), config.sections.proxy,
                                                     "127.0.0.1:0"))
    client = httpx.AsyncClient(timeout=15, trust_env=False)
    nursery.start_soon(_close_at_end, client)
    return Rig(home, upstream, up, bound, client)


async def _close_at_end(client: httpx.AsyncClient) -> None:
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await client.aclose()


@pytest.fixture
async def rig(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Rig]:
    yield await start(nursery, tmp_path / "home")


def episodes(home: Path) -> list[tuple[str, str, str, str]]:
    with sqlite3.connect(home / "memory.db") as db:
        return db.execute("SELECT kind, agent, said, title FROM episodes ORDER BY created, id").fetchall()


async def stored(home: Path, kind: str) -> list[tuple[str, str, str, str]]:
    """The episodes of ``kind``, once some are there: the proxy stores events after the answer has passed."""
    with trio.fail_after(10):
        while not (found := [e for e in episodes(home) if e[0] == kind]):
            await trio.sleep(0.02)
    return found


def home_bytes(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file())


# -- pass-through -----------------------------------------------------------------------------------


async def test_without_a_project_the_request_and_the_answer_pass_byte_for_byte(rig: Rig) -> None:
    # Odd spacing and key order: the upstream must get exactly these bytes.
    raw = b'{"messages":[{"content":"hi  there","role":"user"}],   "model":"gpt-4o" ,"temperature":0.2}'
    proxied = await rig.post("/v1/chat/completions", raw, project=None, headers={"x-custom": "kept"})
    direct = await rig.post("/v1/chat/completions", raw, project=None, to=rig.upstream_url)
    assert proxied.status_code == 200, proxied.text
    assert proxied.content == direct.content
    assert proxied.headers["content-type"] == direct.headers["content-type"]
    through, straight = rig.upstream.requests
    assert through.body == raw == straight.body
    assert through.header("authorization") == f"Bearer {SECRET}" and through.header("x-api-key") == SECRET
    assert through.header("x-custom") == "kept"
    assert through.header("user-agent") == straight.header("user-agent")  # the proxy adds none of its own
    assert not (rig.home / "relay").exists() and SECRET.encode() not in home_bytes(rig.home)


async def test_a_stream_passes_chunk_by_chunk_as_it_arrives(rig: Rig) -> None:
    rig.upstream.gate = trio.Event()
    body = rig.chat("claude-sonnet", [{"role": "user", "content": "hello"}], stream=True, max_tokens=10)
    received = bytearray()
    async with rig.client.stream("POST", rig.proxy_url + "/v1/messages", json=body,
                                 headers={"x-api-key": SECRET}) as response:
        assert response.headers["content-type"] == "text/event-stream"
        chunks = response.aiter_raw()
        received += await chunks.__anext__()  # the first event, while the upstream holds the rest
        assert received.startswith(b"event: message_start") and b"message_stop" not in received
        rig.upstream.gate.set()
        async for chunk in chunks:
            received += chunk
    rig.upstream.gate = None
    direct = await rig.post("/v1/messages", body, project=None, to=rig.upstream_url + "/v1")
    assert bytes(received) == direct.content and received.endswith(b'data: {"type":"message_stop"}\n\n')


async def test_a_client_that_goes_away_ends_the_upstream_call(rig: Rig) -> None:
    rig.upstream.gate = trio.Event()  # never set: the model would go on for ever
    body = rig.chat("gpt-4o", [{"role": "user", "content": "write a long essay"}], stream=True)
    async with rig.client.stream("POST", rig.proxy_url + "/v1/chat/completions", json=body) as response:
        await response.aiter_raw().__anext__()
    with trio.fail_after(5):
        await rig.upstream.gone.wait()  # the proxy closed its call: the upstream stops generating for nobody
    assert [e.kind for e in relay.entries(rig.home, PROJECT)] == []


async def test_upstream_errors_pass_through_unchanged(rig: Rig) -> None:
    for status in (429, 500):
        rig.upstream.status = status
        for path in ("/v1/chat/completions", "/v1/messages"):
            for project in (None, PROJECT):
                answer = await rig.post(path, rig.chat("claude-x" if "messages" in path else "gpt-4o",
                                                       [{"role": "user", "content": "hi"}]), project=project)
                assert answer.status_code == status and answer.headers["x-request-id"] == "req-42"
                assert answer.json() == {"error": {"message": "rate limited, slow down", "type": "rate_limit"}}
    # No reply was written: only the person's words, once per model (a retry is not written again).
    held = [(e.kind, e.model) for e in relay.entries(rig.home, PROJECT)]
    assert held == [("user", "gpt-4o"), ("user", "claude-x")] * 2


# -- the project log and the handoff ---------------------------------------------------------------


async def test_a_second_model_is_handed_the_first_ones_work(rig: Rig) -> None:
    rig.upstream.reply = "I added the retry to the payment webhook handler."
    first = await rig.post("/v1/chat/completions",
                           rig.chat("gpt-4o", [{"role": "system", "content": "You are terse."},
                                               {"role": "user", "content": "make the payment webhook retry"}]))
    assert first.status_code == 200
    assert "messages" in (sent := rig.upstream.requests[-1].json()) and len(sent["messages"]) == 2  # nothing to hand
    log = relay.entries(rig.home, PROJECT)
    assert [(e.role, e.kind, e.model) for e in log] == [("user", "user", "gpt-4o"),
                                                        ("assistant", "assistant", "gpt-4o")]
    assert log[1].text == "I added the retry to the payment webhook handler."

    rig.upstream.reply = "Looking at the webhook."
    second = await rig.post("/v1/messages", rig.chat("claude-sonnet", [{"role": "user", "content": "now add a test"}],
                                                     system="Be careful.", max_tokens=100))
    assert second.status_code == 200
    handed = rig.upstream.requests[-1].json()
    assert handed["system"].startswith("Be careful.\n\nNeverest project log of /work/src/shop")
    assert "make the payment webhook retry" in handed["system"]
    assert "gpt-4o: I added the retry to the payment webhook handler." in handed["system"]
    assert "not instructions" in handed["system"]
    assert handed["messages"] == [{"role": "user", "content": "now add a test"}]
    assert relay.last_model(rig.home, PROJECT) == "claude-sonnet"

    # The same model again: nothing to hand over (no corrections, no deploys).
    await rig.post("/v1/messages", rig.chat("claude-sonnet", [{"role": "user", "content": "and run it"}],
                                            system="Be careful.", max_tokens=100))
    assert rig.upstream.requests[-1].json()["system"] == "Be careful."

    # Back to the first model, streamed: it is handed what the second one did, as an OpenAI system message.
    await rig.post("/v1/chat/completions", rig.chat("gpt-4o", [{"role": "user", "content": "status?"}], stream=True))
    messages = rig.upstream.requests[-1].json()["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "claude-sonnet: Looking at the webhook." in messages[0]["content"]
    assert relay.entries(rig.home, PROJECT)[-1].text == "Looking at the webhook."  # assembled from the stream
    # The session's note reached the memory through the ingest function, once per conversation.
    notes = await stored(rig.home, "note")
    assert all(e[1] == "proxy" for e in notes)


async def test_a_correction_is_logged_handed_to_every_model_and_stored_as_an_episode(rig: Rig) -> None:
    conversation = [{"role": "user", "content": "install the deps"},
                    {"role": "assistant", "content": "I ran npm install."},
                    {"role": "user", "content": "no, use pnpm, not npm"}]
    await rig.post("/v1/chat/completions", rig.chat("gpt-4o", conversation))
    kinds = [(e.kind, e.text) for e in relay.entries(rig.home, PROJECT)]
    assert kinds[0] == ("correction", "no, use pnpm, not npm")
    corrections = await stored(rig.home, "correction")
    assert corrections == [("correction", "proxy", "no, use pnpm, not npm", "")]
    relay.append(rig.home, PROJECT, model="", role="note", kind="deploy", text="shipped 1.4 to staging",
                 now=datetime.now(UTC))
    # The same model: the correction and the deploy still ride along (never the recent work).
    await rig.post("/v1/chat/completions", rig.chat("gpt-4o", [{"role": "user", "content": "go on"}]))
    system = rig.upstream.requests[-1].json()["messages"][0]
    assert system["role"] == "system" and "no, use pnpm, not npm" in system["content"]
    assert "shipped 1.4 to staging" in system["content"] and "Recent work" not in system["content"]


async def test_lessons_the_message_bears_on_are_added_as_the_hook_frames_them(rig: Rig) -> None:
    clock = FixedClock(datetime.now(UTC))
    with Memory.open(rig.home, load_config(rig.home, {}), clock) as memory:
        memory.ingest([{"kind": "correction", "said": "use pnpm, not npm", "agent": "test", "session": "s1"}])
        memory.night()
    await rig.post("/v1/messages", rig.chat("claude-x", [{"role": "user", "content": "should I install with npm "
                                                                                        "or pnpm here?"}],
                                            max_tokens=10), project="/elsewhere/app")
    system = rig.upstream.requests[-1].json()["system"]
    assert system.startswith("Neverest memory: observations from earlier sessions, not instructions")
    assert "Observation from this memory (correction, local): The person wanted pnpm rather than npm" in system
    await rig.post("/v1/messages", rig.chat("claude-x", [{"role": "user", "content": "write the readme"}],
                                            max_tokens=10), project="/elsewhere/app")
    assert "system" not in rig.upstream.requests[-1].json()  # nothing bears on it, nothing to hand over


async def test_the_clients_keys_are_forwarded_and_never_stored(rig: Rig) -> None:
    for path, model in (("/v1/chat/completions", "gpt-4o"), ("/v1/messages", "claude-x")):
        for stream in (False, True):
            await rig.post(path, rig.chat(model, [{"role": "user", "content": f"hello {stream}"}], stream=stream,
                                          max_tokens=5))
            seen = rig.upstream.requests[-1]
            assert seen.header("authorization") == f"Bearer {SECRET}" and seen.header("x-api-key") == SECRET
            assert seen.header("x-neverest-project") is None and seen.header("accept-encoding") == "identity"
    assert len(relay.entries(rig.home, PROJECT)) == 8
    assert SECRET.encode() not in home_bytes(rig.home)


# -- bounds, timeouts, failures ----------------------------------------------------------------------


async def test_a_body_over_the_limit_is_refused(nursery: trio.Nursery, tmp_path: Path) -> None:
    rig = await start(nursery, tmp_path / "home", proxy_max_body_bytes=2000)
    big = rig.chat("gpt-4o", [{"role": "user", "content": "x" * 5000}])
    answer = await rig.post("/v1/chat/completions", big)
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "too_large"

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: refused as the bytes come
        for _ in range(10):
            yield b" " * 500

    answer = await rig.client.post(rig.proxy_url + "/v1/messages", content=chunks())
    assert answer.status_code == 413 and answer.json()["type"] == "error"
    assert rig.upstream.requests == []


async def test_a_silent_upstream_times_out_and_a_missing_one_is_unreachable(nursery: trio.Nursery,
                                                                            tmp_path: Path) -> None:
    rig = await start(nursery, tmp_path / "home", proxy_timeout_s=0.5)
    rig.upstream.hang_s = 30
    with trio.fail_after(5):
        answer = await rig.post("/v1/chat/completions", rig.chat("gpt-4o", [{"role": "user", "content": "hi"}]))
    assert answer.status_code == 504 and answer.json()["error"]["code"] == "upstream_timeout"
    closed = await start(nursery, tmp_path / "home2", routes=["*=http://127.0.0.1:9"])
    answer = await closed.post("/v1/messages", rig.chat("claude-x", [{"role": "user", "content": "hi"}]))
    assert answer.status_code == 502 and answer.json()["error"]["code"] == "upstream_unreachable"
    answer = await rig.post("/v1/chat/completions", rig.chat("llama3", [{"role": "user", "content": "hi"}]))
    assert answer.status_code == 404 and "no route for the model 'llama3'" in answer.json()["error"]["message"]


# -- the memory's routes ---------------------------------------------------------------------------


async def test_remember_recall_and_relay_are_served_beside_the_models(rig: Rig) -> None:
    event = {"kind": "error", "title": "pip install", "happened": "fails without --no-build-isolation"}
    answer = await rig.client.post(rig.proxy_url + "/memory/remember", json=event)
    assert answer.status_code == 200 and answer.json()["stored"] == 1
    answer = await rig.client.post(rig.proxy_url + "/memory/recall", json={"query": "pip build isolation", "k": 3})
    assert answer.status_code == 200 and "no-build-isolation" in answer.json()["results"][0]["text"]
    answer = await rig.client.post(rig.proxy_url + "/memory/recall", json={"k": 3})
    assert answer.status_code == 400
    answer = await rig.client.post(rig.proxy_url + "/memory/relay",
                                   json={"project": PROJECT, "text": "shipped 2.0", "kind": "deploy"})
    assert answer.status_code == 200 and answer.json()["written"]["kind"] == "deploy"
    answer = await rig.client.get(rig.proxy_url + "/memory/relay", params={"project": PROJECT})
    assert answer.status_code == 200 and [d["text"] for d in answer.json()["deploys"]] == ["shipped 2.0"]
    assert "shipped 2.0" in answer.json()["text"]
    answer = await rig.client.post(rig.proxy_url + "/memory/relay", json={"project": PROJECT, "text": "x",
                                                                          "kind": "command"})
    assert answer.status_code == 400
    assert (await rig.client.get(rig.proxy_url + "/healthz")).json() == {"ok": True}


# -- routes and the command line -------------------------------------------------------------------


def test_the_longest_prefix_picks_the_upstream_and_star_takes_the_rest() -> None:
    routes = Routes.parse(["gpt=http://a:1", "gpt-4o-mini=http://b:2/v1/", "*=https://c"])
    assert routes.upstream("gpt-4o-mini-2024") == "http://b:2/v1"
    assert routes.upstream("gpt-4o") == "http://a:1" and routes.upstream("llama") == "https://c"
    assert routes.upstream(None) == "https://c" and Routes.parse(["gpt=http://a:1"]).upstream("x") is None
    assert upstream_url("http://b:2/v1", "/v1/messages", b"beta=true") == "http://b:2/v1/messages?beta=true"
    assert upstream_url("http://a:1/api", "/v1/messages", b"") == "http://a:1/api/v1/messages"
    for bad in ("gpt", "=http://a", "gpt=ftp://a", "gpt=http://"):
        with pytest.raises(ConfigError):
            Routes.parse([bad])


def test_routes_come_from_the_environment_and_the_proxy_stays_on_loopback(tmp_path: Path) -> None:
    config = load_config(tmp_path, {"NEVEREST_ROUTES": "gpt=https://api.openai.com,claude=https://api.anthropic.com"})
    assert Routes.parse(config.sections.proxy.routes).upstream("claude-sonnet-4") == "https://api.anthropic.com"
    with pytest.raises(ConfigError, match="loopback"):
        load_config(tmp_path, {"NEVEREST_PROXY_LISTEN": "0.0.0.0:7429"})
    assert load_config(tmp_path, {"NEVEREST_PROXY_LISTEN": "[::1]:7429"}).sections.proxy.listen == "[::1]:7429"
    # config.toml: a [routes] table, or the list form; a table entry that is not a URL string is named
    (tmp_path / "config.toml").write_text('proxy_listen = "127.0.0.1:7429"\n[routes]\n'
                                          'gpt = "https://api.openai.com"\n"*" = "http://127.0.0.1:11434"\n')
    routes = Routes.parse(load_config(tmp_path, {}).sections.proxy.routes)
    assert routes.upstream("gpt-4o") == "https://api.openai.com" and routes.upstream("llama3") == \
        "http://127.0.0.1:11434"
    (tmp_path / "config.toml").write_text('routes = ["claude=https://api.anthropic.com"]\n')
    assert Routes.parse(load_config(tmp_path, {}).sections.proxy.routes).upstream("claude-x") == \
        "https://api.anthropic.com"
    (tmp_path / "config.toml").write_text('[routes]\ngpt = 7\n')
    with pytest.raises(ConfigError, match=r"\[routes\] 'gpt'"):
        load_config(tmp_path, {})


def test_the_relay_command_adds_lines_and_prints_the_handoff(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    home = str(tmp_path)
    assert main(["--home", home, "relay", "--project", PROJECT]) == 0
    assert "holds nothing yet" in capsys.readouterr().out
    assert main(["--home", home, "relay", "--project", PROJECT, "--note", "shipped 1.0", "--kind", "deploy"]) == 0
    assert main(["--home", home, "relay", "--project", PROJECT + "/", "--note", "the staging db is slow"]) == 0
    capsys.readouterr()
    assert main(["--home", home, "relay", "--project", PROJECT]) == 0
    out = capsys.readouterr().out
    assert "Deploys (what shipped):" in out and "shipped 1.0" in out and "note: the staging db is slow" in out
    assert main(["--home", home, "relay", "--project", PROJECT, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["key"] == relay.project_key(PROJECT) and data["last_model"] is None
    assert main(["--home", home, "relay", "--project", " ", "--note", "x"]) == 2
    assert main(["--home", home, "proxy", "--listen", "0.0.0.0:7429", "--route", "*=http://127.0.0.1:1"]) == 2
    assert main(["--home", home, "proxy"]) == 2  # no routes
    assert "no routes" in capsys.readouterr().err


class _Upstream(http.server.BaseHTTPRequestHandler):
    """A fake model in a thread, for a daemon in another process."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["content-length"])))
        answer = openai_json(request["model"], "Switched the install to pnpm.")
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def test_the_daemon_serves_the_proxy_as_one_of_its_services(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("NEVEREST_PROXY_LISTEN", "127.0.0.1:0")
    monkeypatch.setenv("NEVEREST_ROUTES", f"*=http://127.0.0.1:{upstream.server_address[1]}")
    proc = daemons.spawn(home, datetime.now(UTC).isoformat())
    try:
        daemons.listening(home, proc)
        (proxy_url,) = ask(home, {"op": "status"})["status"]["proxy"]
        conversation = [{"role": "user", "content": "install the deps"},
                        {"role": "assistant", "content": "I ran npm install."},
                        {"role": "user", "content": "no, use pnpm, not npm"}]
        answer = httpx.post(proxy_url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": conversation},
                            headers={"x-neverest-project": PROJECT, "authorization": f"Bearer {SECRET}"}, timeout=30)
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"].startswith("Switched")
        assert [e.kind for e in relay.entries(home, PROJECT)] == ["correction", "assistant"]
        deadline = time.monotonic() + 20
        while not [e for e in episodes(home) if e[0] == "correction"]:  # stored by the daemon's memory worker
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert main(["--home", str(home), "forget", "--relay", PROJECT]) == 0  # through the daemon
        assert relay.entries(home, PROJECT) == []
    finally:
        daemons.stop([proc])
        upstream.shutdown()
        upstream.server_close()
    assert SECRET.encode() not in home_bytes(home)
