"""A stand-in for a model API, for examples/proxy-handoff.sh: answers OpenAI-style
``POST /v1/chat/completions`` and Anthropic-style ``POST /v1/messages`` (JSON, not streamed) on 127.0.0.1.

``python examples/fake_model.py "first reply|second reply" HANDED_FILE`` prints its port, then serves until
killed: it answers with its replies in turn, and writes to HANDED_FILE the system text of the last request
(what the proxy handed the model besides the person's message), so you can see it.  Standard library only.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

MAX_BODY_BYTES = 8 * 1024 * 1024


def handed(body: dict[str, Any]) -> str:
    """The system text the request carried (the proxy puts the handoff and the lessons there)."""
    system = body.get("system")
    parts: list[str] = []
    if isinstance(system, str):
        parts.append(system)
    elif isinstance(system, list):
        parts += [b.get("text", "") for b in system if isinstance(b, dict)]
    for message in body.get("messages") or []:
        if isinstance(message, dict) and message.get("role") in ("system", "developer") \
                and isinstance(message.get("content"), str):
            parts.append(message["content"])
    return "\n".join(p for p in parts if p)


class Model(BaseHTTPRequestHandler):
    replies: ClassVar[list[str]] = ["done"]
    handed_file = ""
    calls = 0

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY_BYTES:
            self.send_error(413)
            return
        body = json.loads(self.rfile.read(length) or b"{}")
        with open(self.handed_file, "w", encoding="utf-8") as out:
            out.write(handed(body) or "(nothing)")
        reply = self.replies[Model.calls % len(self.replies)]
        Model.calls += 1
        if self.path.endswith("/chat/completions"):
            answer: dict[str, Any] = {"id": "c1", "object": "chat.completion", "model": body.get("model"),
                                      "choices": [{"index": 0, "finish_reason": "stop",
                                                   "message": {"role": "assistant", "content": reply}}]}
        else:
            answer = {"id": "m1", "type": "message", "role": "assistant", "model": body.get("model"),
                      "content": [{"type": "text", "text": reply}], "stop_reason": "end_turn"}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> int:
    Model.replies, Model.handed_file = sys.argv[1].split("|"), sys.argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Model)
    print(server.server_address[1], flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
