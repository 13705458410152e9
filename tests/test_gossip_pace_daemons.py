"""Paced gossip between real neverestd processes on 127.0.0.1: while everything is in sync the rounds
space out; a memory that receives something new wakes up at once, so a lesson still crosses the
network at the full rate (gossip/pace.py)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neverest.control import ask
from neverest.ctl import main as ctl
from neverest.gossip.pace import WARM_ROUNDS
from tests.daemons import listening, spawn, stop

NOW = "2026-03-01T09:00:00Z"
EVERY_S = 0.1
QUIET_EVERY_S = 30.0
ERROR = ["--kind", "error", "--title", "pip install -e .", "--happened", "fails without --no-build-isolation"]


def status(home: Path) -> dict[str, Any]:
    answer: dict[str, Any] = ask(home, {"op": "status"})["status"]
    return answer


@pytest.fixture
def line_of_three(tmp_path: Path) -> Iterator[list[Path]]:
    """A is told of B, B of C; they meet the rest through peer exchange."""
    procs: list[subprocess.Popen[bytes]] = []
    homes = [tmp_path / name for name in "ABC"]
    try:
        urls: list[str] = []
        for i in (2, 1, 0):  # C first, so that B can be told where C listens, then A where B does
            home = homes[i]
            home.mkdir(mode=0o700)
            peers = f'peers = ["{urls[-1]}"]\n' if urls else ""
            (home / "config.toml").write_text(f"gossip_every_s = {EVERY_S}\ngossip_quiet_every_s = {QUIET_EVERY_S}\n"
                                              f"mdns = false\ningest_every_s = 0.0\n{peers}")
            procs.append(spawn(home, NOW))
            urls.append(listening(home, procs[-1]))
        yield homes
    finally:
        stop(procs)


def run(capsys: pytest.CaptureFixture[str], home: Path, *argv: str) -> str:
    status_code = ctl(["--home", str(home), *argv])
    out = capsys.readouterr().out
    assert status_code == 0, (argv, out)
    return out


def wait_until(what: str, ok: Any, timeout_s: float) -> float:
    start = time.monotonic()
    while not ok():
        assert time.monotonic() - start < timeout_s, f"not within {timeout_s} s: {what}"
        time.sleep(0.05)
    return time.monotonic() - start


def test_quiet_rounds_space_out_and_a_new_lesson_still_crosses_at_the_full_rate(
        line_of_three: list[Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.setenv("NEVEREST_NOW", NOW)
    a, b, c = line_of_three
    # In sync from the start (nothing to share): B's rounds space out until its wait is 12.8 s
    # (0.1 s doubled from the 4th quiet round on), reached about 13 s after it started.
    quiet = WARM_ROUNDS + 7
    wait_until("B's rounds are quiet", lambda: status(b)["quiet_rounds"] >= quiet, 60)
    before = status(b)["exchanges"].get("ok", 0)
    time.sleep(2.0)
    # At the full rate B would have made about 20 exchanges in these 2 s.
    assert status(b)["exchanges"].get("ok", 0) - before <= 1

    project = tmp_path / "project"
    project.mkdir()
    for session in ("s1", "s2"):
        run(capsys, a, "remember", *ERROR, "--cwd", str(project), "--session", session)
    run(capsys, a, "publish", "--project", str(project))
    quiet_ok = status(b)["exchanges"].get("ok", 0)
    run(capsys, a, "sleep")  # the lesson is made, and a round ends the sleep: A pushes it to B (and C)
    # B received it from A (who asked) and woke: at once back at the full rate, not after the
    # >= 12.8 s it was waiting (the two seconds above saw at most one exchange of B).
    wait_until("B is back at the full rate", lambda: status(b)["exchanges"].get("ok", 0) >= quiet_ok + 5, 2.5)
    assert status(b)["quiet_rounds"] < quiet
    [lesson] = [json.loads(line) for line in run(capsys, a, "lessons", "--json").splitlines()]

    def c_holds_it() -> bool:
        held = run(capsys, c, "lessons", "--json").splitlines()
        return any(json.loads(line)["hash"] == lesson["hash"] for line in held)

    # A met C's address through B (peer exchange), so the lesson may come from either.
    wait_until("the lesson reaches C", c_holds_it, 3.0)
