"""The one body reader of the gossip and commons apps: bounded before it keeps a byte, and timed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from neverest.serving import BodyRefused, ClientGone, read_body


def messages(*items: dict[str, Any], stall: bool = False) -> Callable[[], Awaitable[dict[str, Any]]]:
    """An ASGI ``receive`` giving ``items`` in order, then (with ``stall``) never anything more."""
    queue = list(items)
    taken: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if not queue and stall:
            await trio.sleep_forever()
        taken.append(queue.pop(0))
        return taken[-1]
    receive.taken = taken  # type: ignore[attr-defined]
    return receive


def chunk(data: bytes, more: bool = False) -> dict[str, Any]:
    return {"type": "http.request", "body": data, "more_body": more}


async def test_a_body_in_chunks_is_read_whole() -> None:
    body = await read_body([(b"content-length", b"6")], messages(chunk(b"abc", True), chunk(b"def")),
                           limit=6, timeout_s=1)
    assert body == b"abcdef"


async def test_a_declared_body_over_the_limit_is_refused_before_a_byte_is_read() -> None:
    receive = messages(chunk(b"x" * 11))
    with pytest.raises(BodyRefused) as refused:
        await read_body([(b"content-length", b"11")], receive, limit=10, timeout_s=1)
    assert (refused.value.status, refused.value.code) == (413, "too-large")
    assert receive.taken == []  # type: ignore[attr-defined]


async def test_an_undeclared_body_is_refused_at_the_chunk_that_takes_it_over() -> None:
    with pytest.raises(BodyRefused) as refused:
        await read_body([], messages(chunk(b"x" * 6, True), chunk(b"x" * 5, True), chunk(b"")), limit=10, timeout_s=1)
    assert refused.value.status == 413 and "over 10 bytes" in refused.value.message


async def test_a_content_length_that_is_no_number_is_the_clients_fault() -> None:
    for value in (b"-1", b"1e3", b" 5"):
        with pytest.raises(BodyRefused) as refused:
            await read_body([(b"content-length", value)], messages(chunk(b"")), limit=10, timeout_s=1)
        assert (refused.value.status, refused.value.code) == (400, "bad-request")


async def test_a_client_that_goes_away_leaves_nobody_to_answer() -> None:
    with pytest.raises(ClientGone):
        await read_body([], messages(chunk(b"ab", True), {"type": "http.disconnect"}), limit=10, timeout_s=1)


async def test_a_trickling_body_is_cut_off_at_the_timeout(autojump_clock: trio.testing.MockClock) -> None:
    with pytest.raises(BodyRefused) as refused:
        await read_body([], messages(chunk(b"a", True), stall=True), limit=10, timeout_s=30)
    assert (refused.value.status, refused.value.code) == (408, "body-timeout")
    assert trio.current_time() == pytest.approx(30)

