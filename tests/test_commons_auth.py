"""The commons' limit on failed authentications, per client address, with the app in-process.

The real ``CommonsApp`` is driven through httpx's ASGI transport, one transport per client
address, with an injected monotonic clock; no socket, no server.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from neverest.transports.commons_app import CommonsApp, Limits
from neverest.transports.commons_auth import FailureLimiter, address_key

TOKEN = "good-token-0123456789abcdef"
WRONG = "wrong-token-0123456789abcdef"
BURST = 20


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


Client = Callable[..., httpx.AsyncClient]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def app(tmp_path: Path, clock: Clock) -> AsyncIterator[CommonsApp]:
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKEN + "\n")
    tokens.chmod(0o600)
    app = CommonsApp.open(tmp_path / "data", tokens, monotonic=clock,
                          limits=Limits(auth_failure_rate_per_s=1 / 6, auth_failure_burst=BURST,
                                        trusted_proxies=frozenset({"10.9.9.9"})))
    yield app
    app.close()


@pytest.fixture
def client(app: CommonsApp) -> Client:
    def make(address: str, token: str | None = TOKEN, **headers: str) -> httpx.AsyncClient:
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        return httpx.AsyncClient(transport=httpx.ASGITransport(app, client=(address, 40000)),
                                 base_url="http://commons.test", headers=headers)
    return make


async def statuses(http: httpx.AsyncClient, n: int) -> list[int]:
    return [(await http.get("/commons/index")).status_code for _ in range(n)]


async def test_wrong_tokens_from_one_address_are_limited_and_other_addresses_are_not(
        client: Client, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="neverest.commons"):
        async with client("203.0.113.7", WRONG) as guesser, client("198.51.100.2") as honest, \
                client("203.0.113.7") as same_address:
            got = await statuses(guesser, 50)
            assert got == [403] * BURST + [429] * (50 - BURST)
            limited = await guesser.get("/commons/index")
            assert limited.json()["error"] == "rate-limited" and int(limited.headers["retry-after"]) >= 1
            # Another address with a good token is served as if nothing happened.
            assert await statuses(honest, 5) == [200] * 5
            # The blocked address is refused before its credentials are looked at, good or not:
            # a guesser must not be able to go on guessing by ignoring the 429s.
            assert (await same_address.get("/commons/index")).status_code == 429
            # The bucket refills: one more try every 6 s.
            clock.now += 6.1
            assert await statuses(guesser, 2) == [403, 429]
            clock.now += 6.1
            assert (await same_address.get("/commons/index")).status_code == 200
    # Logged once for the whole flood (the first failure), not 50 times.
    messages = [r.getMessage() for r in caplog.records]
    refused = [m for m in messages if "refused" in m and "203.0.113.7" in m]
    assert len(refused) == 1, refused


async def test_the_log_says_how_many_refusals_were_not_logged(client: Client, clock: Clock,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="neverest.commons"):
        async with client("203.0.113.8", None) as anonymous:
            assert await statuses(anonymous, 10) == [401] * 10
            clock.now += 61
            assert await statuses(anonymous, 1) == [401]
    refused = [r.getMessage() for r in caplog.records if "203.0.113.8" in r.getMessage()]
    assert len(refused) == 2 and "(9 more from this address not logged)" in refused[1]


async def test_an_ipv6_client_is_counted_by_its_64(client: Client) -> None:
    for i in range(BURST):
        async with client(f"2001:db8:0:7::{i + 1:x}", WRONG) as http:  # a fresh address each time
            assert (await http.get("/commons/index")).status_code == 403
    async with client("2001:db8:0:7::ffff", WRONG) as http:
        assert (await http.get("/commons/index")).status_code == 429
    async with client("2001:db8:0:8::1") as http:  # another /64
        assert (await http.get("/commons/index")).status_code == 200


async def test_behind_a_trusted_proxy_the_forwarded_address_is_counted(client: Client) -> None:
    async with client("10.9.9.9", WRONG, **{"x-forwarded-for": "192.0.2.1, 203.0.113.9"}) as via_proxy:
        assert await statuses(via_proxy, BURST + 1) == [403] * BURST + [429]
    async with client("10.9.9.9", **{"x-forwarded-for": "203.0.113.10"}) as other_via_proxy:
        assert (await other_via_proxy.get("/commons/index")).status_code == 200
    # An untrusted peer cannot pick the address it is counted by.
    async with client("203.0.113.11", WRONG, **{"x-forwarded-for": "203.0.113.12"}) as liar:
        assert await statuses(liar, BURST + 1) == [403] * BURST + [429]
    async with client("203.0.113.12") as named:
        assert (await named.get("/commons/index")).status_code == 200


def test_the_addresses_tracked_are_bounded() -> None:
    limiter = FailureLimiter(1.0, 2.0, lambda: 0.0, max_addresses=100)
    for i in range(10_000):
        limiter.failed(f"10.0.{i // 256}.{i % 256}")
    assert len(limiter) == 100
    assert limiter.wait("10.0.0.0") == 0.0  # forgotten first: it only gets a fresh burst back


def test_address_keys() -> None:
    assert address_key("192.0.2.1") == "192.0.2.1"
    assert address_key("2001:db8::1") == address_key("2001:db8::ffff") == "2001:db8::/64"
    assert address_key("::ffff:192.0.2.1") == "192.0.2.1"
    assert address_key("fe80::1%eth0") == "fe80::/64"
    assert address_key("testclient") == "testclient"
