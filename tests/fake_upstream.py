"""A fake model server (an ASGI app for hypercorn on 127.0.0.1) answering both chat formats, JSON and
streamed, for the proxy's tests and benchmark: the proxy is what is tested, this only answers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import trio

from neverest.serving import handled_by_server


@dataclass
class Seen:
    method: str
    path: str
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: str) -> str | None:
        found = [v.decode("latin-1") for k, v in self.headers if k == name.encode()]
        return found[-1] if found else None

    def json(self) -> Any:
        return json.loads(self.body)


def sse(events: list[tuple[str | None, object]]) -> list[bytes]:
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        out.append((f"event: {name}\n" if name else "").encode() + f"data: {text}\n\n".encode())
    return out


def openai_json(model: str, reply: str) -> bytes:
    return json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "model": model,
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                                    "finish_reason": "stop"}]}).encode()


def anthropic_json(model: str, reply: str) -> bytes:
    return json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": model,
                       "content": [{"type": "text", "text": reply}], "stop_reason": "end_turn"}).encode()


def openai_stream(model: str, reply: str) -> list[bytes]:
    words = reply.split(" ")
    chunks: list[tuple[str | None, object]] = [
        (None, {"id": "c1", "model": model, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
    chunks += [(None, {"id": "c1", "model": model,
                       "choices": [{"index": 0, "delta": {"content": (" " if i else "") + w}}]})
               for i, w in enumerate(words)]
    chunks += [(None, {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}), (None, "[DONE]")]
    return sse(chunks)


def anthropic_stream(model: str, reply: str) -> list[bytes]:
    words = reply.split(" ")
    events: list[tuple[str | None, object]] = [
        ("message_start", {"type": "message_start", "message": {"id": "msg_1", "model": model, "content": []}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}})]
    events += [("content_block_delta", {"type": "content_block_delta", "index": 0,
                                        "delta": {"type": "text_delta", "text": (" " if i else "") + w}})
               for i, w in enumerate(words)]
    events += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
               ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
               ("message_stop", {"type": "message_stop"})]
    return sse(events)


@dataclass
class FakeUpstream:
    """Answers ``/v1/chat/completions`` and ``/v1/messages``; ``status`` other than 200 answers an error
    (with an ``x-request-id`` header), ``hang_s`` waits before answering, ``gate`` holds a stream after its
    first chunk until it is set, ``token_delay_s`` spaces the events of a stream as a model's tokens are."""

    reply: str = "The build needs the --no-build-isolation flag."
    status: int = 200
    hang_s: float = 0.0
    gate: trio.Event | None = None
    token_delay_s: float = 0.0
    record: bool = True
    requests: list[Seen] = field(default_factory=list)
    gone: trio.Event = field(default_factory=trio.Event)  # a stream's client went away

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if await handled_by_server(scope, receive, send):
            return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        if self.record:
            self.requests.append(Seen(scope["method"], scope["path"], list(scope["headers"]), bytes(body)))
        if self.hang_s:
            await trio.sleep(self.hang_s)
        if self.status != 200:
            error = json.dumps({"error": {"message": "rate limited, slow down", "type": "rate_limit"}}).encode()
            await send({"type": "http.response.start", "status": self.status,
                        "headers": [(b"content-type", b"application/json"), (b"x-request-id", b"req-42"),
                                    (b"content-length", str(len(error)).encode())]})
            await send({"type": "http.response.body", "body": error})
            return
        request = json.loads(body or b"{}")
        model = str(request.get("model", ""))
        anthropic = scope["path"].endswith("/messages")
        if not request.get("stream"):
            answer = (anthropic_json if anthropic else openai_json)(model, self.reply)
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(answer)).encode())]})
            await send({"type": "http.response.body", "body": answer})
            return
        chunks = (anthropic_stream if anthropic else openai_stream)(model, self.reply)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})

        async def watch(cancel: trio.CancelScope) -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            self.gone.set()
            cancel.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, nursery.cancel_scope)
            for i, chunk in enumerate(chunks):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if i == 0 and self.gate is not None:
                    await self.gate.wait()
                if self.token_delay_s:
                    await trio.sleep(self.token_delay_s)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            nursery.cancel_scope.cancel()
