"""The commons' bearer tokens, per-token rate limits, and the limit on failed authentications.

Tokens come from a file, one per line (blank lines and ``#`` comments skipped), 16 to 512
characters of the RFC 6750 token set; the file is read again when it changes, and a broken
new version leaves the previous tokens in force.  Logs name a token only by the first 8 hex
digits of its SHA-256.  Each token has a token bucket, driven by an injected monotonic clock.
Failed authentications (no token, a wrong one) are limited per client address by another
bucket (``FailureLimiter``), and logged at most once a minute per address.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import math
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

log = logging.getLogger("neverest.commons")

MIN_TOKEN_CHARS: Final = 16
MAX_TOKEN_CHARS: Final = 512
TOKENS_RECHECK_S: Final = 1.0
_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


class CommonsServerError(Exception):
    """The server cannot start; the message says what the operator should fix."""


def token_id(token: bytes) -> str:
    """How logs name a token: never the token itself."""
    return hashlib.sha256(token).hexdigest()[:8]


def load_tokens(path: Path) -> list[bytes]:
    """The tokens of a tokens file; raises CommonsServerError naming the line at fault."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CommonsServerError(f"cannot read the tokens file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CommonsServerError(f"the tokens file {path} is not UTF-8 text") from None
    tokens: list[bytes] = []
    for number, line in enumerate(text.splitlines(), 1):
        token = line.strip()
        if not token or token.startswith("#"):
            continue
        # Never echo the token: the error may end up in a shared log.
        if not MIN_TOKEN_CHARS <= len(token) <= MAX_TOKEN_CHARS or not _TOKEN.fullmatch(token):
            raise CommonsServerError(
                f"{path} line {number}: a token is {MIN_TOKEN_CHARS} to {MAX_TOKEN_CHARS} characters of "
                "A-Z a-z 0-9 - . _ ~ + / (then optionally =), e.g. the output of `openssl rand -hex 32`")
        tokens.append(token.encode("ascii"))
    if not tokens:
        raise CommonsServerError(f"the tokens file {path} holds no token: nobody could use the server")
    return tokens


class Tokens:
    """The bearer tokens in force, re-read when their file changes."""

    def __init__(self, path: Path, monotonic: Callable[[], float]) -> None:
        self.path = path
        self._monotonic = monotonic
        self._tokens = load_tokens(path)
        self._signature = self._file_signature()
        self._checked = -math.inf
        self.generation = 0  # bumped whenever the set of tokens in force changes

    def _file_signature(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def _maybe_reload(self) -> None:
        now = self._monotonic()
        if now - self._checked < TOKENS_RECHECK_S:
            return
        self._checked = now
        signature = self._file_signature()
        if signature == self._signature:
            return
        self._signature = signature
        try:
            tokens = load_tokens(self.path)
        except CommonsServerError as exc:
            # Locking everyone out because of a half-edited file would be worse than keeping
            # the tokens that were in force a second ago.
            log.error("%s; the previous tokens stay in force", exc)
            return
        self._tokens = tokens
        self.generation += 1
        log.info("tokens file %s read again: %d token(s)", self.path, len(tokens))

    def identify(self, presented: bytes) -> str | None:
        """The id of the token presented, or None when it is not one of ours."""
        self._maybe_reload()
        found: bytes | None = None
        for token in self._tokens:
            # No early exit: the time taken does not tell which token (or how much of one) matched.
            if hmac.compare_digest(token, presented):
                found = token
        return token_id(found) if found is not None else None

    def ids(self) -> set[str]:
        return {token_id(t) for t in self._tokens}


class RateLimiter:
    """A token bucket per key: ``rate_per_s`` requests a second, bursts of ``burst``."""

    def __init__(self, rate_per_s: float, burst: float, clock: Callable[[], float]) -> None:
        self.rate = rate_per_s
        self.burst = max(1.0, burst)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (level, time of level)

    def take(self, key: str) -> float:
        """Spend one request: 0.0 when allowed, else the seconds until one would be."""
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        level, then = self._buckets.get(key, (self.burst, now))
        level = min(self.burst, level + max(0.0, now - then) * self.rate)
        if level >= 1.0:
            self._buckets[key] = (level - 1.0, now)
            return 0.0
        self._buckets[key] = (level, now)
        return (1.0 - level) / self.rate

    def keep_only(self, keys: set[str]) -> None:
        """Forget the buckets of revoked tokens, so that memory follows the tokens file."""
        for key in list(self._buckets):
            if key not in keys:
                del self._buckets[key]




# -- failed authentication, per client address ----------------------------------------------

MAX_TRACKED_ADDRESSES: Final = 10_000
# A refused authentication is logged at most once per address per minute; the next line
# logged says how many were not.
LOG_EVERY_S: Final = 60.0


def address_key(host: str) -> str:
    """What failures are counted against: an IPv4 address, or an IPv6 address's /64.

    One machine usually holds a whole IPv6 /64, so counting single addresses would let it
    rotate through fresh ones.  An IPv4-mapped IPv6 address counts as its IPv4 address.
    """
    if ":" not in host:
        return host
    try:
        address = ipaddress.IPv6Address(host.partition("%")[0])
    except ValueError:
        return host  # not an address (a test client's name): count it as given
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.IPv6Network((address, 64), strict=False))


@dataclass(slots=True)
class _Failures:
    level: float  # failures the address may still make (a token bucket)
    then: float  # when ``level`` was computed
    logged_at: float  # when a refusal from the address was last logged
    unlogged: int  # refusals since then that were not


class FailureLimiter:
    """Failed authentications per client address: a token bucket per address.

    An address may fail ``burst`` times at once, then ``rate_per_s`` times a second; past
    that, it is refused before its credentials are even looked at (so a guesser gains no
    tries by ignoring the refusals).  At most ``max_addresses`` addresses are tracked; the
    one that failed least recently is forgotten first, which only gives it a fresh burst.
    ``rate_per_s`` 0 or less disables the limit (logging stays bounded).
    """

    def __init__(self, rate_per_s: float, burst: float, clock: Callable[[], float],
                 max_addresses: int = MAX_TRACKED_ADDRESSES) -> None:
        self.rate = rate_per_s
        self.burst = max(1.0, burst)
        self._clock = clock
        self._max = max(1, max_addresses)
        self._by_address: OrderedDict[str, _Failures] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_address)

    def _level(self, state: _Failures, now: float) -> float:
        return min(self.burst, state.level + max(0.0, now - state.then) * self.rate)

    def wait(self, address: str) -> float:
        """0.0 when ``address`` may try to authenticate now, else the seconds until it may."""
        state = self._by_address.get(address)
        if state is None or self.rate <= 0:
            return 0.0
        level = self._level(state, self._clock())
        return 0.0 if level >= 1.0 else (1.0 - level) / self.rate

    def _state(self, address: str, now: float) -> _Failures:
        state = self._by_address.get(address)
        if state is None:
            state = _Failures(level=self.burst, then=now, logged_at=-math.inf, unlogged=0)
            self._by_address[address] = state
            while len(self._by_address) > self._max:
                self._by_address.popitem(last=False)
        else:
            self._by_address.move_to_end(address)
        return state

    def failed(self, address: str) -> None:
        """Count one failed authentication from ``address``."""
        now = self._clock()
        state = self._state(address, now)
        state.level = max(0.0, self._level(state, now) - 1.0)
        state.then = now

    def should_log(self, address: str) -> tuple[bool, int]:
        """Whether to log a refusal of ``address`` now, and how many went unlogged before it."""
        now = self._clock()
        state = self._state(address, now)
        if now - state.logged_at < LOG_EVERY_S:
            state.unlogged += 1
            return False, 0
        unlogged, state.unlogged, state.logged_at = state.unlogged, 0, now
        return True, unlogged
