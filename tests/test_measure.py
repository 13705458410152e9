"""``neverestctl measure`` on a hand-made store: events remembered over several days (NEVEREST_NOW),
a lesson, resolved predictions, and the hooks' log of injected and held-out sessions."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from neverest.agents.measure import last_day_summary
from neverest.clock import FixedClock, iso
from neverest.config import Config
from neverest.ctl import main
from neverest.memory.embed import HASHED_SPACE, hashed_vector, to_blob
from neverest.memory.service import Memory

DAY1 = datetime(2026, 6, 1, 10, tzinfo=UTC)
DAY2 = datetime(2026, 6, 2, 10, tzinfo=UTC)
DAY3 = datetime(2026, 6, 3, 10, tzinfo=UTC)
PNPM = "use pnpm, not npm, in this repository"
PROXY = ("npm ci", "npm ci fails behind the corporate proxy with ECONNRESET")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "memory"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("NEVEREST_HOME", str(home))
    return home


def _remember(monkeypatch: pytest.MonkeyPatch, at: datetime, kind: str, session: str, **fields: str) -> None:
    monkeypatch.setenv("NEVEREST_NOW", iso(at))
    args = ["remember", "--kind", kind, "--agent", "claude", "--session", session]
    for name, value in fields.items():
        args += [f"--{name}", value]
    assert main(args) == 0


def _day_store(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Day 1: a correction and an error, nothing known yet.
    _remember(monkeypatch, DAY1, "correction", "s1", said=PNPM)
    _remember(monkeypatch, DAY1, "error", "s1", title=PROXY[0], happened=PROXY[1])
    # Day 2: the same correction again (in other words) and a new one; the error again, now that a
    # lesson about it exists, and an unrelated error.
    _remember(monkeypatch, DAY2, "correction", "inj", said="use pnpm, not npm, in this repository please")
    _remember(monkeypatch, DAY2, "correction", "held", said="write the failing test before the fix")
    _remember(monkeypatch, DAY2, "error", "held", title=PROXY[0], happened=PROXY[1])
    _remember(monkeypatch, DAY2, "error", "inj", title="cargo", happened="linker cc not found")
    with Memory.open(home, Config(), FixedClock(DAY3)) as memory, memory.store.write() as db:
        vector = to_blob(hashed_vector(f"{PROXY[0]}: {PROXY[1]}"))
        db.execute("INSERT INTO lessons (hash, kind, text, strength, seen, created, updated, space, embedding) "
                   "VALUES ('h1', 'error', 'npm ci needs the proxy', 1, 2, ?, ?, ?, ?)",
                   (iso(DAY1.replace(hour=23)), iso(DAY1.replace(hour=23)), HASHED_SPACE, vector))
        for outcome, resolved in (("confirmed", DAY2), ("failed", DAY2), ("confirmed", DAY3), ("merged", DAY3)):
            db.execute("INSERT INTO predictions (lesson_id, text, made, resolved, outcome) VALUES (1, 'p', ?, ?, ?)",
                       (iso(DAY1), iso(resolved), outcome))


def _measure(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    monkeypatch.setenv("NEVEREST_NOW", iso(DAY3))
    capsys.readouterr()
    assert main(["measure", "--days", "3", "--json"]) == 0
    result: dict[str, object] = json.loads(capsys.readouterr().out)
    return result


def test_the_rates_by_day(home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _day_store(home, monkeypatch)
    result = _measure(monkeypatch, capsys)
    days = {d["day"]: d for d in result["days"]}  # type: ignore[attr-defined]
    assert list(days) == ["2026-06-01", "2026-06-02", "2026-06-03"]
    first, second, third = days.values()
    assert (first["corrections"], first["repeat_rate"]) == (1, 0.0)
    assert (first["errors"], first["repeated_error_rate"]) == (1, 0.0)  # the lesson came after it
    assert (second["corrections"], second["repeated_corrections"], second["repeat_rate"]) == (2, 1, 0.5)
    assert (second["errors"], second["repeated_errors"]) == (2, 1)
    assert (second["predictions_resolved"], second["prediction_accuracy"]) == (2, 0.5)
    assert (third["predictions_resolved"], third["prediction_accuracy"]) == (1, 1.0)  # merged is no outcome
    assert third["repeat_rate"] is None  # no correction that day: no rate, not zero
    assert result["total"]["corrections"] == 3  # type: ignore[index]
    assert str(result["split"]).startswith("unavailable")
    assert "injected" not in second


def test_injected_against_held_out_sessions(home: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    _day_store(home, monkeypatch)
    with Memory.open(home, Config(), FixedClock(DAY3)) as memory, memory.store.write() as db:
        # What the hook logs (schema v4): the sessions it saw, held out or not.
        db.execute("INSERT INTO hook_sessions (session, held_out, cwd, first) VALUES ('inj', 0, '', ?)",
                   (iso(DAY2),))
        db.execute("INSERT INTO hook_sessions (session, held_out, cwd, first) VALUES ('held', 1, '', ?)",
                   (iso(DAY2),))
    result = _measure(monkeypatch, capsys)
    second = result["days"][1]  # type: ignore[index]
    assert second["injected"] == {"corrections": 1, "repeat_rate": 1.0, "errors": 1, "repeated_error_rate": 0.0}
    assert second["held_out"] == {"corrections": 1, "repeat_rate": 0.0, "errors": 1, "repeated_error_rate": 1.0}
    assert result["split"] == "available"


def test_the_morning_line_is_the_last_full_day(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _day_store(home, monkeypatch)
    with Memory.open(home, Config(), FixedClock(DAY3)) as memory:
        line = last_day_summary(memory)
    assert "2026-06-02" in line and "repeat-yourself 50% of 2 correction(s)" in line
    assert "repeated errors 50% of 2" in line and "predictions 50% of 2 confirmed" in line


def test_the_table_and_a_bad_days_value(home: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    _day_store(home, monkeypatch)
    monkeypatch.setenv("NEVEREST_NOW", iso(DAY3))
    capsys.readouterr()
    assert main(["measure", "--days", "2"]) == 0
    out = capsys.readouterr().out
    assert "2026-06-02" in out and " 50% of 2" in out and "2026-06-01" not in out
    assert main(["measure", "--days", "0"]) == 2
    assert os.environ["NEVEREST_HOME"] == str(home)


def test_many_days_are_bounded_by_what_the_memory_holds(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    _day_store(home, monkeypatch)
    monkeypatch.setenv("NEVEREST_NOW", iso(DAY3 + timedelta(days=10)))
    capsys.readouterr()
    assert main(["measure", "--days", "500", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # From the first day with something to measure (2026-06-01) to today: 13 days, not 500.
    assert result["total"]["from"] == "2026-06-01" and len(result["days"]) == 13
    assert main(["measure", "--days", "500"]) == 0
    lines = capsys.readouterr().out.splitlines()
    days = [line.split()[0] for line in lines[1:] if line[:4].isdigit()]
    assert days == ["2026-06-01", "2026-06-02", "2026-06-03"]  # only the days with something measured
    assert "13 day(s), 2026-06-01 to 2026-06-13: nothing to measure before 2026-06-01" in lines[-2]
    assert "10 day(s) with nothing to measure not shown" in lines[-2] and len(lines) == 7
    assert main(["measure", "--days", "100000"]) == 2
    assert "--days 100000: give a number of days from 1 to 3660" in capsys.readouterr().err


def test_an_empty_memory_has_nothing_to_measure(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NEVEREST_NOW", iso(DAY3))
    assert main(["measure", "--days", "500"]) == 0
    assert capsys.readouterr().out.startswith("nothing to measure in the last 500 day(s)")
    assert main(["measure", "--days", "500", "--json"]) == 0
    assert [d["day"] for d in json.loads(capsys.readouterr().out)["days"]] == ["2026-06-03"]
