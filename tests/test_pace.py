"""The pacing of gossip rounds (gossip/pace.py): full rate while anything moves, spaced out while all is in sync."""

from __future__ import annotations

from neverest.gossip.pace import WARM_ROUNDS, Outcome, Pace

IN_SYNC = Outcome(completed=True, in_sync=True, moved=0)
MOVED = Outcome(completed=True, in_sync=False, moved=2)
FAILED = Outcome(completed=False, in_sync=False, moved=0)


def quiet_waits(pace: Pace, rounds: int, root: bytes = b"r") -> list[float]:
    return [pace.after_round(root, [IN_SYNC, IN_SYNC]) for _ in range(rounds)]


def test_the_waits_stay_at_the_period_for_the_warm_rounds_then_double_up_to_the_quiet_period() -> None:
    pace = Pace(every_s=1.0, quiet_every_s=10.0)
    waits = quiet_waits(pace, WARM_ROUNDS + 6)
    # The first round only learns the root: it is not quiet yet.
    assert waits[:WARM_ROUNDS] == [1.0] * WARM_ROUNDS
    assert waits[WARM_ROUNDS:] == [2.0, 4.0, 8.0, 10.0, 10.0, 10.0]


def test_a_round_that_moved_records_or_a_changed_root_gives_back_the_full_rate() -> None:
    pace = Pace(every_s=1.0, quiet_every_s=60.0)
    quiet_waits(pace, 10)
    assert pace.wait_s() == 60.0
    assert pace.after_round(b"r", [IN_SYNC, MOVED]) == 1.0
    quiet_waits(pace, 10)
    assert pace.after_round(b"other", [IN_SYNC]) == 1.0  # something arrived between rounds
    quiet_waits(pace, 10, root=b"other")
    not_in_sync = Outcome(completed=True, in_sync=False, moved=0)  # e.g. a peer's declined origins differ
    assert pace.after_round(b"other", [not_in_sync]) == 1.0


def test_failed_exchanges_neither_wake_nor_count_as_change() -> None:
    pace = Pace(every_s=1.0, quiet_every_s=60.0)
    quiet_waits(pace, 6)
    before = pace.quiet_rounds
    pace.after_round(b"r", [FAILED, FAILED, IN_SYNC])
    assert pace.quiet_rounds == before + 1
    pace.after_round(b"r", [])  # no healthy peer at all: nothing new either
    assert pace.quiet_rounds == before + 2


def test_wake_brings_back_the_period_and_the_growth_starts_over() -> None:
    pace = Pace(every_s=2.0, quiet_every_s=100.0)
    quiet_waits(pace, 12)
    assert pace.wait_s() == 100.0
    pace.wake()
    assert pace.wait_s() == 2.0
    assert quiet_waits(pace, WARM_ROUNDS) == [2.0] * (WARM_ROUNDS - 1) + [4.0]


def test_a_period_longer_than_the_quiet_period_is_kept_and_a_long_quiet_run_never_overflows() -> None:
    pace = Pace(every_s=900.0, quiet_every_s=60.0)
    assert set(quiet_waits(pace, 20)) == {900.0}
    fast = Pace(every_s=0.5, quiet_every_s=30.0)
    assert quiet_waits(fast, 5000)[-1] == 30.0
