"""Virtual time for in-process tests of services that do their store work in worker threads.

trio's ``MockClock(autojump_threshold=0)`` jumps to the next deadline as soon as every task is
blocked.  But the daemon's services run SQLite in worker threads (``trio.to_thread.run_sync``:
the gossip service's store turns, the memory worker), and a task waiting for a thread is
blocked too: autojump would move the clock while a thread works, so that a round's exchange
could time out, or another memory's nap end, in the middle of a store write, depending on how
fast the machine runs that thread.  A larger threshold only makes that rarer, and slower.

``autojump`` is the same jump with one more condition: no worker thread is out (no token of
trio's default thread limiter, nor of the ``limiters`` given, is borrowed).  Virtual time then
passes only while every task waits for a timer, so what happens at which virtual time does not
depend on the machine's speed.  Run it in the test's nursery with a ``MockClock`` that does not
jump by itself (pytest-trio's ``mock_clock`` fixture), and cancel it at the end.
"""

from __future__ import annotations

import math
from typing import NoReturn

import pytest
import trio
import trio.testing

# Real seconds of idleness before the clock may jump: a thread's result comes back through trio's
# wake-up socket at once, so this only sets how often a test that waits for a thread looks again.
CUSHION_S = 0.001


async def autojump(clock: trio.testing.MockClock, *limiters: trio.CapacityLimiter) -> NoReturn:
    """Jump ``clock`` to the next deadline whenever every other task is blocked and no thread is out."""
    watched = (trio.to_thread.current_default_thread_limiter(), *limiters)
    while True:
        await trio.testing.wait_all_tasks_blocked(CUSHION_S)
        if any(limiter.borrowed_tokens for limiter in watched):
            continue  # a thread is working: its answer may wake a task before any timer should
        jump = trio.lowlevel.current_statistics().seconds_to_next_deadline
        if 0 < jump < math.inf:
            clock.jump(jump)


@pytest.fixture
def real_rate_clock() -> trio.testing.MockClock:
    """A clock that runs at the real rate and jumps when the test says (``jump``): for tests on real
    sockets, where autojump would take the moments between a send and its receipt for idleness.
    pytest-trio runs a test that asks for it (and its fixtures) on it."""
    return trio.testing.MockClock(rate=1.0)
