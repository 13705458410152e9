"""An optional local model behind an OpenAI-compatible HTTP API, used only when it is there.

The memory works without any model: vectors fall back to hashed word vectors (embed.py) and
lesson texts to deterministic ones.  A model (Ollama, llama.cpp's server, vLLM...) only makes
them better, so every call here *fails soft*: whatever goes wrong (nothing listening, a timeout,
an HTTP error, a body that is not the JSON it should be, or one too large) becomes a
``ModelError`` inside this module and ``None`` for the ``Writer``'s caller, with the reason kept
in ``last_error`` for the sleep's report.

``ModelClient`` is the one way this package talks to such a server, shared by the writer below
and ``embed.ModelEmbedder``, through ``neverest.httpclient``.  The server is treated as untrusted
input: connect, read and total time are bounded, the response is streamed and refused past
``max_body_bytes`` (counted after any content decoding, so a compressed bomb is cut too),
redirects are not followed, and NaN or Infinity are not accepted as JSON.  Both take an
injectable ``httpx`` transport (``transport``) to fake the server in tests.

The writer's answer is cut to its first line and to ``MAX_ANSWER_CHARS``; deciding whether that
line is an acceptable lesson (an observation, not an instruction) is the caller's job, with the
safety detector, so this module never imports it.
"""

from __future__ import annotations

import json
import re
import time
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Final, NoReturn
from urllib.parse import urlsplit

if TYPE_CHECKING:  # httpx and trio (in httpclient) are loaded by the first client made, not by every reader
    import httpx

DEFAULT_CONNECT_TIMEOUT_S: Final = 2.0
DEFAULT_READ_TIMEOUT_S: Final = 30.0
# httpx's read timeout is per read, so a server trickling one byte at a time could hold a
# call for ever; the total bound closes that.
DEFAULT_TOTAL_TIMEOUT_S: Final = 120.0
# A batch of 64 texts at 8192 dimensions is about 13 MB of JSON: 64 MiB leaves room for
# larger batches and still bounds what a wrong or hostile server can make us hold.
DEFAULT_MAX_BODY_BYTES: Final = 64 * 1024 * 1024

MAX_ANSWER_CHARS: Final = 300
DEFAULT_MAX_TOKENS: Final = 120

_JSON_BODY: Final = {"Content-Type": "application/json"}
_LINE_HEAD_CHARS: Final = 8 * MAX_ANSWER_CHARS  # room for white space that collapses

# Reasoning models served through Ollama may prefix the answer with their thinking.
_THINKING: Final = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)


class ModelError(Exception):
    """The model could not be used for this call; the message says why."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a model is served and how long and how much to wait for it.

    ``base_url`` is the API root, e.g. ``http://127.0.0.1:11434/v1``; paths such as
    ``/embeddings`` are appended to it.  ``api_key``, when set, is sent as a bearer token.
    A malformed URL is a configuration mistake and raises ``ValueError`` here, loudly, rather
    than failing softly on every call.
    """

    base_url: str
    model: str
    api_key: str | None = None
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    total_timeout_s: float = DEFAULT_TOTAL_TIMEOUT_S
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"model URL {self.base_url!r} is not an http:// or https:// URL with a host")
        if not self.model.strip():
            raise ValueError("the model name is empty")
        if self.api_key is not None and not (self.api_key.isascii() and self.api_key.isprintable()):
            raise ValueError("the model API key must be printable ASCII (it travels in an HTTP header)")
        for name in ("connect_timeout_s", "read_timeout_s", "total_timeout_s", "max_body_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")


class ModelClient:
    """A synchronous client for one OpenAI-compatible server.  Not shared between threads."""

    def __init__(self, endpoint: Endpoint, *, transport: httpx.BaseTransport | None = None) -> None:
        from neverest import httpclient

        self.endpoint = endpoint
        headers = {"Accept": "application/json"}
        if endpoint.api_key:
            headers["Authorization"] = f"Bearer {endpoint.api_key}"
        self._client = httpclient.sync_client(transport=transport, connect_timeout_s=endpoint.connect_timeout_s,
                                              read_timeout_s=endpoint.read_timeout_s, headers=headers)

    def post_json(self, path: str, payload: Mapping[str, object]) -> object:
        """POST ``payload`` as JSON to ``base_url + path`` and return the decoded JSON answer.

        Raises ``ModelError`` for every failure, whatever its cause.
        """
        from neverest import httpclient

        url = self.endpoint.base_url.rstrip("/") + path
        total = self.endpoint.total_timeout_s
        deadline = time.monotonic() + total
        try:
            # ensure_ascii: a lone surrogate (a file name decoded with surrogateescape) becomes
            # an escape the server can cope with, where UTF-8 encoding would fail the call.
            body = json.dumps(payload, ensure_ascii=True).encode("ascii")
            answer = httpclient.post_bounded_sync(self._client, url, body, headers=_JSON_BODY,
                                                  max_bytes=self.endpoint.max_body_bytes, total_timeout_s=total)
            return json.loads(answer.body, parse_constant=_refuse_constant)
        except httpclient.PeerRefused as exc:
            if exc.oversize:
                raise ModelError(f"the answer from {url} is over the {self.endpoint.max_body_bytes}-byte limit "
                                 f"({exc.detail})") from None
            detail = f": {_printable(exc.detail)}" if exc.detail else ""
            raise ModelError(f"HTTP {exc.status} from {url}{detail}") from None
        except httpclient.TransportFailure as exc:
            if exc.kind == "timeout" and time.monotonic() >= deadline:
                raise ModelError(f"the answer from {url} took over {total:g} s") from None
            if exc.kind == "timeout":
                raise ModelError(f"timed out talking to {url} ({exc.detail})") from None
            raise ModelError(f"cannot reach {url}: {exc.detail}") from None
        except RecursionError:
            raise ModelError(f"the answer from {url} is JSON nested too deeply") from None
        except ValueError as exc:  # JSON and UTF-8 errors in the answer
            raise ModelError(f"the answer from {url} is not valid JSON: {exc}") from None

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ModelClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class Writer:
    """Asks a chat model for one short line of text; ``None`` whenever it cannot.

    ``write`` sends the system and user messages with temperature 0, so the same prompt to the
    same model gives the same line as far as the server allows, and returns the first non-blank
    line of the answer with control characters removed, runs of white space made one space,
    and cut to ``MAX_ANSWER_CHARS`` at a word boundary.  On any failure it returns ``None`` and
    sets ``last_error``; a success clears it.
    """

    def __init__(self, endpoint: Endpoint, *, max_tokens: int = DEFAULT_MAX_TOKENS,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.endpoint = endpoint
        self.max_tokens = max_tokens
        self.last_error: str | None = None
        self._client = ModelClient(endpoint, transport=transport)

    def write(self, prompt: str, system: str) -> str | None:
        payload = {
            "model": self.endpoint.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": self.max_tokens,
        }
        try:
            answer = _one_line(_content(self._client.post_json("/chat/completions", payload)))
        except ModelError as exc:
            self.last_error = str(exc)
            return None
        self.last_error = None
        return answer

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a number JSON allows")


def _content(answer: object) -> str:
    """``choices[0].message.content`` of a chat completion, checked at every step."""
    choices = answer.get("choices") if isinstance(answer, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        raise ModelError("the chat answer has no choices[0].message.content string")
    return content


def _printable(text: str) -> str:
    """``text`` without control characters (a terminal escape in a lesson would be an attack)."""
    return "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in text)


def _one_line(content: str) -> str:
    text = _THINKING.sub("", content, count=1)
    raw = next((raw for raw in text.splitlines() if raw.strip()), "")
    # Only the head of the line can survive the cut below, so a huge answer costs little.
    line = " ".join(_printable(raw[:_LINE_HEAD_CHARS]).split())
    if not line:
        raise ModelError("the chat answer is empty")
    if len(line) > MAX_ANSWER_CHARS:
        cut = line[:MAX_ANSWER_CHARS]
        # Cut at the last space when there is one in the last third; a word cut in two reads worse.
        space = cut.rfind(" ")
        line = cut[:space] if space > MAX_ANSWER_CHARS * 2 // 3 else cut
    return line.rstrip()
