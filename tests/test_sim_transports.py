"""simulations/transports.py: gossip against the real HTTP commons on 127.0.0.1, small runs."""

from __future__ import annotations

import argparse
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from simulations import transports
from simulations.transports import DAY_S, Options, sleep_offsets

N, DAYS, SEED = 12, 2, 1


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the run's temporary folders go, so that the test can see they are all removed."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def without_wall(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_wall(v) for k, v in value.items() if k != "wall_s"}
    return value


def assert_cleaned_up(scratch: Path) -> None:
    assert not [t for t in threading.enumerate() if t.name == "commons-server"]
    assert list(scratch.iterdir()) == []


def first_reach(n: int, seed: int) -> float:
    """When the commons must reach everyone: each agent's first sleep after agent 0's first push."""
    offsets = sleep_offsets(n, seed)
    return max(o if o > offsets[0] else o + DAY_S for o in offsets[1:])


def test_both_transports_reach_everyone_and_the_counts_follow_from_the_schedule(tmp_path: Path,
                                                                                scratch: Path) -> None:
    result = transports.run(Options(agents=N, days=DAYS, seed=SEED, out=tmp_path / "plots", quiet=True))
    assert_cleaned_up(scratch)
    gossip, commons = result["gossip"], result["commons"]
    assert (result["experiment"], result["agents"], result["fanout"], result["days"]) == ("transports", N, 3, DAYS)

    assert gossip["reach_s"] is not None and commons["reach_s"] is not None
    assert gossip["curve"][-1][1] == commons["curve"][-1][1] == N
    assert gossip["reach_s"] == gossip["rounds"] * gossip["period_s"] <= DAYS * DAY_S
    assert gossip["reach_h"] == gossip["reach_s"] / 3600
    # The commons reaches an agent at its first pull after agent 0's first push, not before.
    expected = first_reach(N, SEED)
    assert expected <= commons["reach_s"] <= DAYS * DAY_S
    assert commons["reach_s"] == expected

    # Gossip: every byte has an agent at both ends; the busiest agent carries at least the mean.
    assert gossip["bytes_per_agent"] == 2 * gossip["bytes_total"] / N
    assert gossip["bytes_per_agent"] <= gossip["bytes_centre"] < gossip["bytes_total"]
    # The commons: every byte goes through the server, and has one agent at the other end.
    assert commons["bytes_centre"] == commons["bytes_total"] == commons["bytes_per_agent"] * N
    assert 0 < commons["bytes_total_at_reach"] <= commons["bytes_total"]
    assert commons["idle_bytes_per_day"] > 0 and gossip["idle_bytes_per_day"] > 0

    # A warm commons: one push and one poll per sleep; agent 0's file is the only one that changes,
    # so every other agent fetches one file once and every poll but those finds nothing new.
    sleeps = N * DAYS
    assert commons["errors"] == 0
    assert commons["pushes"] == commons["polls"] == sleeps
    assert commons["file_requests"] == N - 1
    assert commons["empty_polls"] == sleeps - (N - 1)
    assert commons["requests"] == 2 * sleeps + N - 1
    assert commons["index_not_modified"] == sleeps - N  # each agent reads the changed index once

    assert Path(result["plot"]) == tmp_path / "plots" / f"transports-n{N}-s{SEED}.png"
    assert Path(result["plot"]).read_bytes().startswith(b"\x89PNG")
    text = transports.summary(result)
    assert "gossip" in text and "commons" in text


def test_the_same_seed_gives_the_same_result(scratch: Path) -> None:
    first = transports.run(Options(agents=N, days=DAYS, seed=7, quiet=True))
    second = transports.run(Options(agents=N, days=DAYS, seed=7, quiet=True))
    assert "plot" not in first
    assert without_wall(first) == without_wall(second)
    other = transports.run(Options(agents=N, days=DAYS, seed=8, quiet=True))
    assert without_wall(other) != without_wall(first)
    assert_cleaned_up(scratch)


def test_a_cold_commons_makes_every_agent_read_every_file_once(scratch: Path) -> None:
    result = transports.run(Options(agents=N, days=DAYS, seed=SEED, quiet=True, cold=True))
    assert_cleaned_up(scratch)
    commons = result["commons"]
    assert commons["errors"] == 0 and commons["reach_s"] == first_reach(N, SEED)
    # Each first push is a new origin: over the first two days each agent fetches each other file.
    assert commons["file_requests"] == N * (N - 1)


def test_a_failure_midway_still_stops_the_server_and_removes_its_folder(scratch: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(transports, "_sleep", broken)
    with pytest.raises(RuntimeError, match="boom"):
        transports.run(Options(agents=4, days=1, quiet=True))
    assert_cleaned_up(scratch)


def test_arguments() -> None:
    p = argparse.ArgumentParser()
    transports.add_arguments(p)
    p.add_argument("--seed", type=int, default=1)  # what cli.py adds to every experiment
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(["--agents", "20", "--days", "2", "--seed", "3", "--quiet"])
    assert transports.options_from(args, Path("out")) == Options(agents=20, fanout=3, seed=3, days=2,
                                                                 out=Path("out"), quiet=True)
    with pytest.raises(SystemExit):
        p.parse_args(["--agents", "1"])
