"""Time, injected.

No logic in Neverest reads the wall clock itself: it takes a ``Clock``, so tests
and simulations can replay months in seconds.  ``NEVEREST_NOW`` (an ISO 8601
time) pins the clock of every command, which is how a user replays a scenario
by hand ("what does this memory say 91 days from now?").
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Final, Protocol

NOW_ENV: Final = "NEVEREST_NOW"


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware, in UTC."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class FixedClock:
    """A clock that only moves when told to (tests, simulations, NEVEREST_NOW)."""

    def __init__(self, at: datetime) -> None:
        self._at = at.astimezone(UTC)

    def now(self) -> datetime:
        return self._at

    def advance(self, delta: timedelta) -> None:
        self._at += delta

    def set(self, at: datetime) -> None:
        self._at = at.astimezone(UTC)


def parse_time(text: str) -> datetime:
    """An ISO 8601 time; one without a zone is taken as UTC.  Raises ValueError."""
    at = datetime.fromisoformat(text.strip())
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


@functools.lru_cache(maxsize=64)
def iso(at: datetime) -> str:
    """The one timestamp format Neverest writes: UTC with microseconds, 'Z'.

    Cached: a batch of records received at one ``now`` formats the same time thousands of times.
    """
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def clock_from_env(env: Mapping[str, str] | None = None) -> Clock:
    """The clock a command should use: pinned by NEVEREST_NOW when set, else the system's."""
    value = (os.environ if env is None else env).get(NOW_ENV)
    if not value:
        return SystemClock()
    try:
        return FixedClock(parse_time(value))
    except ValueError:
        raise ValueError(f"{NOW_ENV}={value!r} is not an ISO 8601 time") from None
