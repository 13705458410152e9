"""The two chat wire formats the proxy speaks, read and edited without I/O.

- **OpenAI-style** ``POST /v1/chat/completions``: ``{"model", "messages": [{"role", "content"}...],
  "stream"}``; ``content`` is a string or a list of parts (``{"type": "text", "text"}``...); an assistant
  message may carry ``tool_calls`` (``{"id", "function": {"name", "arguments"}}``) answered by ``tool``
  messages.  A JSON answer's text is ``choices[0].message.content``; a stream is Server-Sent Events
  whose ``data:`` lines are chunks with ``choices[i].delta.content``, ending with ``data: [DONE]``.
- **Anthropic-style** ``POST /v1/messages``: ``{"model", "system", "messages": [{"role", "content"}...],
  "stream"}``; ``content`` is a string or a list of blocks (``text``, ``tool_use``, ``tool_result``...);
  ``system`` a string or a list of text blocks.  A JSON answer's text is in its ``content`` blocks; a
  stream's events are ``content_block_start`` (a ``tool_use`` block names its tool),
  ``content_block_delta`` with a ``text_delta``, ... ``message_stop``.

What the proxy needs of them: the model; the person's last words (``last_user_text``); the end of the
conversation as the session reader's turns (``tail_as_claude_lines``: the same detector reads both
formats); the request with a text added as a system message (``with_system``); and the reply's text,
from a JSON answer (``reply_text``) or assembled from a stream as it passes (``StreamText``).  Anything
unexpected in a body reads as nothing: the proxy then passes the request through unchanged.
"""

from __future__ import annotations

import json
from typing import Any, Final

OPENAI: Final = "openai"
ANTHROPIC: Final = "anthropic"
PATHS: Final = {"/v1/chat/completions": OPENAI, "/v1/messages": ANTHROPIC}
MAX_REPLY_CHARS: Final = 64 * 1024  # what is kept of a reply's text (the relay keeps less)
MAX_SSE_LINE_BYTES: Final = 1024 * 1024  # a longer line of a stream is passed on, not read
# How many messages from the end of a conversation are read as turns (the agent's last reply and what followed).
TAIL_MESSAGES: Final = 8


def _texts(content: object) -> list[str]:
    """The text parts of a message's content (a string, or a list of text parts or blocks)."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p["text"] for p in content
                if isinstance(p, dict) and p.get("type") in ("text", "input_text") and isinstance(p.get("text"), str)]
    return []


def messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    found = body.get("messages")
    return [m for m in found if isinstance(m, dict)] if isinstance(found, list) else []


def last_user_text(body: dict[str, Any]) -> str:
    """The person's last words: the text of the conversation's last message when it is the person's
    (a tool result, or a message of only tool results, is not: '')."""
    found = messages(body)
    if not found or found[-1].get("role") != "user":
        return ""
    return "\n".join(_texts(found[-1].get("content"))).strip()


def first_user_text(body: dict[str, Any]) -> str:
    """The conversation's first words of the person (a stable name for a conversation whose requests
    each carry its whole history)."""
    for message in messages(body):
        if message.get("role") == "user":
            text = "\n".join(_texts(message.get("content"))).strip()
            if text:
                return text
    return ""


def with_system(fmt: str, body: dict[str, Any], text: str) -> dict[str, Any]:
    """``body`` with ``text`` added as a system message: after the client's own system messages
    (OpenAI), or after the client's own ``system`` (Anthropic).  ``body`` itself is not changed."""
    out = dict(body)
    if fmt == OPENAI:
        found = list(body.get("messages") or [])
        at = 0
        while at < len(found) and isinstance(found[at], dict) and found[at].get("role") in ("system", "developer"):
            at += 1
        found.insert(at, {"role": "system", "content": text})
        out["messages"] = found
        return out
    system = body.get("system")
    if isinstance(system, list):
        out["system"] = [*system, {"type": "text", "text": text}]
    elif isinstance(system, str) and system.strip():
        out["system"] = f"{system}\n\n{text}"
    else:
        out["system"] = text
    return out


def tail(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The end of the conversation: from the last agent message before the person's last words (at most
    ``TAIL_MESSAGES``), what the detectors read of one request (``chats.session_of`` turns it into turns)."""
    found = messages(body)[-TAIL_MESSAGES:]
    start = max((i for i, m in enumerate(found[:-1]) if m.get("role") == "assistant"), default=0)
    return found[start:]


def _tools_said(names: list[str]) -> str:
    return f"[called {', '.join(dict.fromkeys(names))}]" if names else ""


def reply_text(fmt: str, answer: object) -> str:
    """The text of a JSON answer (its tool calls named when it made any); '' when it holds none."""
    if not isinstance(answer, dict):
        return ""
    texts: list[str] = []
    tools: list[str] = []
    if fmt == OPENAI:
        choices = answer.get("choices")
        message = choices[0].get("message") if isinstance(choices, list) and choices and \
            isinstance(choices[0], dict) else None
        if isinstance(message, dict):
            texts = _texts(message.get("content"))
            calls = message.get("tool_calls")
            tools = [c["function"]["name"] for c in calls if isinstance(c, dict) and isinstance(c.get("function"), dict)
                     and isinstance(c["function"].get("name"), str)] if isinstance(calls, list) else []
    else:
        content = answer.get("content")
        texts = _texts(content)
        if isinstance(content, list):
            tools = [b["name"] for b in content if isinstance(b, dict) and b.get("type") == "tool_use"
                     and isinstance(b.get("name"), str)]
    text = "".join(texts) if fmt == ANTHROPIC else "\n".join(texts)
    return " ".join(p for p in (text.strip(), _tools_said(tools)) if p)[:MAX_REPLY_CHARS]


class StreamText:
    """The reply's text assembled from a stream of Server-Sent Events, fed chunk by chunk as they pass.

    Bounded: a line of the stream over ``MAX_SSE_LINE_BYTES`` is skipped, and only ``MAX_REPLY_CHARS``
    of text are kept; what cannot be read is left out (the stream itself is passed on untouched)."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self._pending = bytearray()
        self._skipping = False
        self._data: list[bytes] = []
        self._parts: list[str] = []
        self._size = 0
        self._tools: list[str] = []

    def feed(self, chunk: bytes) -> None:
        self._pending += chunk
        while True:
            end = self._pending.find(b"\n")
            if end < 0:
                if len(self._pending) > MAX_SSE_LINE_BYTES:
                    self._pending.clear()
                    self._skipping = True
                return
            line = bytes(self._pending[:end]).rstrip(b"\r")
            del self._pending[:end + 1]
            if self._skipping:
                self._skipping = False
                continue
            self._line(line)

    def _line(self, line: bytes) -> None:
        if not line:  # the blank line that ends an event
            if self._data:
                self._event(b"\n".join(self._data))
                self._data = []
            return
        if line.startswith(b"data:"):
            data = line[5:]
            self._data.append(data[1:] if data.startswith(b" ") else data)

    def _event(self, data: bytes) -> None:
        if data.strip() == b"[DONE]":
            return
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            return
        if not isinstance(obj, dict):
            return
        if self.fmt == OPENAI:
            for choice in obj.get("choices") or []:
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if not isinstance(delta, dict) or (isinstance(choice, dict) and choice.get("index", 0) != 0):
                    continue
                if isinstance(delta.get("content"), str):
                    self._add(delta["content"])
                for call in delta.get("tool_calls") or []:
                    function = call.get("function") if isinstance(call, dict) else None
                    if isinstance(function, dict) and isinstance(function.get("name"), str):
                        self._tools.append(function["name"])
            return
        kind = obj.get("type")
        if kind == "content_block_delta":
            delta = obj.get("delta")
            if isinstance(delta, dict) and delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                self._add(delta["text"])
        elif kind == "content_block_start":
            block = obj.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use" and isinstance(block.get("name"), str):
                self._tools.append(block["name"])

    def _add(self, text: str) -> None:
        if self._size < MAX_REPLY_CHARS:
            self._parts.append(text[:MAX_REPLY_CHARS - self._size])
            self._size += len(self._parts[-1])

    def text(self) -> str:
        """The text so far (the events a stream ended without their blank line included)."""
        if self._pending and not self._skipping:
            self._line(bytes(self._pending).rstrip(b"\r"))
            self._pending.clear()
        if self._data:
            self._event(b"\n".join(self._data))
            self._data = []
        return " ".join(p for p in ("".join(self._parts).strip(), _tools_said(self._tools)) if p)
