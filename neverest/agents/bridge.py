"""The stdio JSON bridge (``neverestctl bridge``): one request on standard input, one answer on standard
output, for programs that would rather start a process than speak MCP or HTTP.

The request is one JSON object, ``{"operation": NAME, "arguments": {...}}`` (``arguments`` may be left
out when there are none), read to the end of standard input and at most ``MAX_REQUEST_BYTES``.  The
answer is one JSON object on one line:

    {"ok": true, "operation": NAME, "result": {...}}                              exit status 0
    {"ok": false, "error": {"code": CODE, "message": TEXT, "argument": NAME}}      exit status 2 or 1

Exit status 2 when the request is at fault (``code``: ``too-large``, ``bad-json``, ``bad-request``,
``unknown-operation``, ``bad-arguments``, ``not-found``, ``refused``, ``no-memory``), 1 when the memory
failed on a right request (``failed``).  Nothing else is ever written to standard output.  The
operations are those of ``neverest/agents/operations.py``; a writing one goes through the running
daemon when there is one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, BinaryIO, Final, TextIO

from neverest.agents.operations import OperationError, OperationFailed, check, decode_json, run_here
from neverest.clock import Clock

MAX_REQUEST_BYTES: Final = 1024 * 1024
AGENT: Final = "bridge"  # the agent named in the events the bridge stores (unless the request names one)


def refusal(code: str, message: str, *, argument: str | None = None) -> dict[str, Any]:
    """A failed answer (``ok`` false) with its error."""
    return {"ok": False, "error": OperationError(code, message, argument=argument).to_json()}


def read_request(stream: BinaryIO) -> object:
    """The request on ``stream``, read to its end, decoded.  Raises OperationError: too large (nothing past
    the bound is read), not UTF-8, not JSON."""
    data = stream.read(MAX_REQUEST_BYTES + 1)
    if len(data) > MAX_REQUEST_BYTES:
        raise OperationError("too-large", f"the request is over {MAX_REQUEST_BYTES} bytes")
    return decode_json(data, "the request")


def answer(stream: BinaryIO, home: Path, clock: Clock) -> tuple[dict[str, Any], int]:
    """The answer to the request on ``stream``, and the exit status."""
    try:
        request = check(read_request(stream), agent=AGENT, now=clock.now())
        result = run_here(request, home, clock)
    except OperationError as exc:
        return {"ok": False, "error": exc.to_json()}, 2
    except OperationFailed as exc:
        return {"ok": False, "error": exc.to_json()}, 1
    return {"ok": True, "operation": request.operation.name, "result": result}, 0


def write(out: TextIO, reply: dict[str, Any]) -> None:
    out.write(json.dumps(reply, ensure_ascii=False, separators=(",", ":")) + "\n")
    out.flush()
