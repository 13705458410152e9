"""The load experiment (simulations/load.py) and its shared views (simulations/overlay.py)."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nacl.signing
import pytest

from neverest.clock import iso
from neverest.gossip.core import Initiator, Responder, drive
from neverest.gossip.ranges import RangeIndex
from neverest.records import origin_of
from simulations import cli, ideal, load
from simulations.overlay import Library, OverlayView

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def record(origin: str, seq: int) -> bytes:
    return json.dumps({"origin": origin, "seq": seq, "at": iso(NOW), "text": "x" * 300}).encode()


def library_of(n: int, seed: int) -> tuple[Library, list[str]]:
    chance = random.Random(seed)
    lib = Library()
    origins = [f"{chance.getrandbits(64):016x}" for _ in range(n)]
    for origin in origins:
        lib.settle(record(origin, 1))
    return lib, origins


@pytest.mark.parametrize("n", [0, 30, 1_000, 5_000])
def test_overlay_index_equals_an_index_built_from_scratch(n: int) -> None:
    """Fingerprints, counts, children and items of base + overlay are those of a RangeIndex of the whole digest."""
    lib, origins = library_of(n, seed=n)
    chance = random.Random(n + 1)
    view = OverlayView(lib, 0)
    fresh = [f"{chance.getrandbits(64):016x}" for _ in range(40)]
    for origin in chance.sample(origins, min(len(origins), 60)) + fresh:  # newer seqs and new origins
        seq = 2 if origin in origins else 1
        view.hold(lib.add(record(origin, seq)) and lib.raw[origin, seq])
    whole = RangeIndex.from_digest(dict(view.index().items(0, 0)))
    mine = view.index()
    assert len(mine) == len(whole) == n + 40 and mine.root == whole.root
    assert dict(mine.items(0, 0)) == {**{o: (1, lib.known[lib.raw[o, 1]].held[0][1]) for o in origins},
                                      **{o: view.entry(o) for o in fresh}} | {o: view.entry(o) for o in origins}
    for bits in (0, 1, 4, 6, 7, 11, 12, 13, 16, 20):
        for _ in range(12):
            prefix = chance.randrange(1 << bits)
            assert mine.count(bits, prefix) == whole.count(bits, prefix)
            assert mine.fingerprint(bits, prefix) == whole.fingerprint(bits, prefix), (bits, prefix)
            assert mine.items(bits, prefix) == whole.items(bits, prefix)
            for b in (1, 2, 5, 6):
                assert mine.children(bits, prefix, b) == whole.children(bits, prefix, b), (bits, prefix, b)


def test_overlay_views_reconcile_through_the_real_core() -> None:
    lib, origins = library_of(2_000, seed=3)
    a, b = OverlayView(lib, 0), OverlayView(lib, 1)
    for k, origin in enumerate(origins[:30]):
        lib.add(record(origin, 2))
        (a if k % 2 else b).hold(lib.raw[origin, 2])
    ka, kb = nacl.signing.SigningKey(b"a" * 32), nacl.signing.SigningKey(b"b" * 32)
    responder = Responder(b, kb)
    rng = random.Random(1)
    result = drive(Initiator(a, ka, origin_of(bytes(kb.verify_key)), now=NOW, rng=rng),
                   lambda req: responder.respond(req, now=NOW, rng=rng).data)
    assert result.error is None and result.records_sent == 15 and result.records_received == 15
    assert a.index().root == b.index().root and a.changes == b.changes == 30
    # A record the library does not know is refused, not stored.
    assert a.apply([record(origins[0], 3)], source="x", now=NOW).refused == {"unknown": 1}


SMALL = load.Options(agents=16, rate=3.0, days=2, period_s=4 * 3600.0, seed=5)


@pytest.fixture(scope="module")
def small() -> dict[str, Any]:
    return load.run(SMALL)


def test_every_lesson_reaches_every_agent_as_fast_as_ideal_push_pull(small: dict[str, Any]) -> None:
    lessons = small["lessons"]
    assert lessons >= 5
    for part in (small["reconcile"], small["digests"], small["ideal"]):
        assert part["lessons_reached_all"] == lessons
    # The same contacts, exchanges that run to their end: no lesson is later than in the ideal.
    assert small["vs_ideal"]["lessons"] == lessons
    assert small["vs_ideal"]["ratio"]["max"] <= 1.05
    assert small["reconcile"]["periods_to_all_each"] == small["ideal"]["periods_to_all_each"]
    assert small["reconcile"]["errors"] == {} and small["digests"]["errors"] == {}


def test_bytes_and_round_trips_are_accounted(small: dict[str, Any]) -> None:
    n, lessons = small["agents"], small["lessons"]
    for key in ("reconcile", "digests"):
        part = small[key]
        assert sum(part["bytes_per_round"]) == part["bytes"] > 0
        assert part["bytes_per_agent_round"] == pytest.approx(part["bytes"] / (n * part["rounds_run"]))
        # Every message has a sender and a receiver: the agents' bytes add up to twice the total.
        assert part["mean_agent_bytes"] * n == pytest.approx(2 * part["bytes"])
        assert part["busiest_agent_bytes"] >= part["mean_agent_bytes"]
        assert part["round_trips_per_exchange"] >= 1 and part["round_trips_max"] >= 2
        # Each lesson is carried once to each agent but its author, and never twice.
        assert part["records_carried"] == lessons * (n - 1)
    probe = small["probe"]["reconcile"]
    assert probe["deliveries"] == n - 1 and probe["carrying_exchanges"] == n - 1
    assert probe["carrying_exchange_bytes"] > probe["record_bytes"] > 300
    assert probe["in_sync_exchange_bytes"] < 1024


def test_whole_digests_cost_more_than_ranges_at_a_hundred_origins() -> None:
    result = load.run(load.Options(agents=100, rate=0.0, days=1, seed=2, baseline_rounds=0))
    rec, dig = result["probe"]["reconcile"], result["probe"]["digests"]
    assert rec["rounds"] == dig["rounds"] == rec["ideal_rounds"]
    assert dig["carrying_exchange_bytes"] > rec["carrying_exchange_bytes"]
    assert result["digests"] is None and result["lessons"] == 0


def test_the_ideal_replay_is_the_ideal_model_on_the_same_contacts() -> None:
    world = load.make_world(40, load.Options(agents=40, seed=9), name="probe", rate=0.0)
    first = 7
    world.publications.append((0.0, first, b"{}"))  # the replay only reads who published when
    replay = load.IdealReplay(world)
    curve = []
    while replay.count[0] < 40:
        replay.round(len(curve))
        curve.append(replay.count[0])
    assert curve == ideal.same_contacts(world.schedule, first, max_rounds=100)


def strip(result: dict[str, Any]) -> dict[str, Any]:
    """The result without what depends on the machine (times, memory, paths)."""
    if isinstance(result, dict):
        return {k: strip(v) for k, v in result.items()
                if not k.endswith(("_s", "_mb")) and k not in ("cpu_ms_per_exchange", "plots")}
    return result


def test_a_seed_gives_the_same_run(small: dict[str, Any]) -> None:
    again = load.run(SMALL)
    assert strip(again) == strip(small)
    other = load.run(load.Options(**{**SMALL.__dict__, "seed": 6}))
    assert strip(other) != strip(small)


def test_two_processes_give_the_run_of_one(small: dict[str, Any]) -> None:
    """The parts run in worker processes (SMALL has workers=2) give what one process gives, part by part,
    with the baseline's rounds given beforehand (it starts beside the week) and not (it waits for it)."""
    assert small["workers"] == 2
    alone = load.run(load.Options(**{**SMALL.__dict__, "workers": 1}))
    assert strip(alone) == {**strip(small), "workers": 1}
    given = {**SMALL.__dict__, "baseline_rounds": 3, "probe_baseline_rounds": 2}
    assert strip(load.run(load.Options(**given))) == {**strip(load.run(load.Options(**{**given, "workers": 1}))),
                                                      "workers": 2}


def test_cli_prints_json_and_draws_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["load", "--agents", "8", "--rate", "2", "--days", "1", "--quiet", "--json",
                     "--out", str(tmp_path)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["experiment"] == "load" and out["agents"] == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["load-n8-s1-bytes.png", "load-n8-s1-spread.png"]
    assert cli.main(["load", "--agents", "8", "--rate", "2", "--days", "1", "--quiet", "--no-plots",
                     "--baseline-rounds", "2"]) == 0
    assert "periods to all, median" in capsys.readouterr().out
