"""The commons experiment's adversaries (simulations/adversaries.py), the honest agents'
refutations, the bulk signer, and the sweep: each strategy does what its name says, at a
size the suite can afford, and the sweep's table and exit status follow the targets.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import nacl.signing
import pytest

from neverest.clock import iso
from neverest.commons import TrustConfig, fact_of
from neverest.config import Config
from neverest.records import lesson_hash, parse, sign_confirm, sign_lesson, sign_refute
from simulations import commons, sweep
from simulations.adversaries import STRATEGIES, Tactics
from simulations.cli import main
from simulations.engine import EPOCH
from simulations.ledger import CONFIRM, LESSON, REFUTE
from simulations.signer import Signer
from simulations.world import KIND, WorldOptions

SMALL = WorldOptions(contexts=4, contexts_per_agent=2, true_lessons=8, false_per_adversary=1.0,
                     false_publish_nights=3, peers_per_agent=6, rounds_per_night=6, sybils_per_adversary=2)
SMALL_CONFIG = Config(vouch_min_resolved=4)


def _play(strategy: str, nights: int, *, agents: int = 30, world: WorldOptions = SMALL,
          tactics: Tactics | None = None, seed: int = 1) -> commons.Run:
    """The world's nights under ``strategy`` (no judging: nothing in the world depends on verdicts)."""
    sim = commons.Run(commons.Options(agents=agents, adversaries=0.3, nights=nights, seed=seed, world=world,
                                      config=SMALL_CONFIG, strategy=strategy, tactics=tactics or Tactics(),
                                      fading=False, quiet=True))
    for night in range(1, nights + 1):
        sim.live(night)
    return sim


def _records(w: commons.World) -> list[tuple[int, int, int, int, int | None]]:
    """(record, signer, kind, lesson, night signed or None for a refused record) of every record."""
    les, origin, kind, _ = w.ledger.arrays()
    out = []
    for r in range(len(w.ledger)):
        fact = w.ledger.facts[r]
        night = (fact.at - EPOCH).days if fact is not None else None
        out.append((r, int(origin[r]), int(kind[r]), int(les[r]), night))
    return out


def _adversary_keys(w: commons.World) -> set[int]:
    return {k for a in w.adversaries for k in (a, *w.sybils_of[a])}


# -- the bulk signer ----------------------------------------------------------------------------


@pytest.mark.parametrize("seq", [1, 17, 123456])
def test_bulk_records_are_the_bytes_the_records_functions_sign(signing_key: nacl.signing.SigningKey,
                                                               seq: int) -> None:
    signer = Signer.of(signing_key)
    when = datetime.fromisoformat(iso(EPOCH.replace(day=3, hour=3)))
    text = "the build of stack 2 fails with error E105 after a lockfile upgrade"
    target = lesson_hash(KIND, text)
    pairs = [
        (signer.about("confirm", target, stamp=iso(when), at=when, seq=seq),
         sign_confirm(signing_key, target, at=iso(when), seq=seq)),
        (signer.about("refute", target, stamp=iso(when), at=when, seq=seq),
         sign_refute(signing_key, target, at=iso(when), seq=seq)),
        (signer.lesson(kind=KIND, text=text, stamp=iso(when), at=when, seq=seq),
         sign_lesson(signing_key, kind=KIND, text=text, seen=1, strength=1.0, updated=iso(when), seq=seq)),
    ]
    for (bulk, fact), real in pairs:
        assert bulk.raw == real.raw  # Ed25519 is deterministic: the same record, a valid signature
        parsed = parse(bulk.raw)
        assert (bulk.type, bulk.target, bulk.origin, bulk.key, bulk.seq) == (
            parsed.type, parsed.target, parsed.origin, parsed.key, parsed.seq)
        assert dict(bulk.fields) == dict(parsed.fields)
        assert fact == fact_of(parsed)


# -- honest refutations -------------------------------------------------------------------------


def test_honest_agents_refute_once_each_false_lesson_they_hold_and_meet_and_the_refutations_spread() -> None:
    sim = _play("collude", 12)
    w = sim.w
    honest = set(w.honest)
    refutations = [(signer, lesson, r) for r, signer, kind, lesson, _ in _records(w)
                   if kind == REFUTE and signer in honest]
    assert refutations, "no honest agent met a false lesson it held: the test proves nothing"
    signed = Counter((signer, lesson) for signer, lesson, _ in refutations)
    assert max(signed.values()) == 1  # once per lesson
    assert set(signed) == {(h, f) for h in w.honest for f in w.agents[h].refuted}
    for signer, lesson, r in refutations:
        assert not w.lessons[lesson].true and lesson not in w.agents[signer].supported
        parse(w.ledger.raw[r])
    # Records like any other: after the night's gossip every honest agent holds every one.
    for h in w.honest:
        row = w.held.row(h)
        assert all(row[r] for _, _, r in refutations)


# -- the strategies -----------------------------------------------------------------------------


def test_collude_forges_and_no_honest_agent_holds_a_forgery() -> None:
    w = _play("collude", 6).w
    forged = [r for r, _, _, _, night in _records(w) if night is None]
    assert len(forged) == 6 * len(w.adversaries)  # one a night each
    assert w.invalid_held(w.honest) == 0 and w.invalid_held(w.adversaries) >= len(forged)


def test_clean_then_lie_signs_nothing_false_before_its_clean_nights_and_colludes_after() -> None:
    tactics = Tactics(clean_nights=5)
    sim = commons.Run(commons.Options(agents=30, adversaries=0.3, nights=12, world=SMALL, config=SMALL_CONFIG,
                                      strategy="clean-then-lie", tactics=tactics, fading=False, quiet=True))
    w, keys = sim.w, _adversary_keys(sim.w)
    for night in range(1, 13):
        sim.live(night)
        if night <= tactics.clean_nights:
            records = _records(w)
            assert not [r for r, _, _, lesson, _ in records if not w.lessons[lesson].true]  # no lie told yet
            assert all(n is not None for *_, n in records)  # and no forgery
    records = _records(w)
    echoes = [n for _, signer, kind, lesson, n in records if signer in keys and kind == CONFIRM
              and w.lessons[lesson].true]
    assert echoes and min(n for n in echoes if n is not None) == 2  # a clean record from the start
    assert any(n is None for *_, n in records)  # forgeries, once the clean nights are over
    for f in w.false:
        published = [n for _, _, kind, lesson, n in records if lesson == f and kind == LESSON]
        assert published == [w.false_night[f]]
        assert tactics.clean_nights < w.false_night[f] <= tactics.clean_nights + SMALL.false_publish_nights
        confirmers = {signer for _, signer, kind, lesson, _ in records if lesson == f and kind == CONFIRM}
        assert len(confirmers) >= len(keys) // 2  # then the keys holding it collude


def test_refute_spam_refutations_are_valid_records_that_honest_agents_hold() -> None:
    w = _play("refute-spam", 6).w
    keys = _adversary_keys(w)
    records = _records(w)
    spam = [(r, signer, lesson) for r, signer, kind, lesson, _ in records if kind == REFUTE and signer in keys]
    for k in keys:  # every key refutes every true lesson it holds, once
        refuted = [lesson for _, signer, lesson in spam if signer == k]
        assert sorted(refuted) == sorted(le for le in w.acted[k] if w.lessons[le].true) and refuted
    for r, _, lesson in spam:
        record = parse(w.ledger.raw[r])  # a real, valid refutation of a true lesson
        assert record.type == "refute" and record.target == w.lessons[lesson].hash and w.lessons[lesson].true
    assert not [r for r, signer, kind, lesson, _ in records if signer in keys and kind == CONFIRM
                and w.lessons[lesson].true]  # it never vouches for the truth
    # Gossip ran after the last night's records were signed: every honest agent holds the spam.
    for h in w.honest:
        row = w.held.row(h)
        assert all(row[r] for r, _, _ in spam)


def test_rare_contexts_places_every_lie_in_the_context_fewest_honest_agents_work_in() -> None:
    world = WorldOptions(contexts=8, contexts_per_agent=2, true_lessons=8, false_per_adversary=1.0,
                         false_publish_nights=3, peers_per_agent=6, rounds_per_night=6, sybils_per_adversary=2)
    w = _play("rare-contexts", 1, world=world).w
    baseline = _play("collude", 1, world=world).w
    workers = Counter(c for agent in w.agents.values() for c in agent.contexts)
    rarest = min((c for c in range(world.contexts) if workers[c]), key=lambda c: (workers[c], c))
    assert workers[rarest] < max(workers.values())  # the draw leaves a rarer context to find
    assert {w.lessons[f].context for f in w.false} == {rarest}
    assert len(w.false) == len(baseline.false) and w.false_night == baseline.false_night
    assert {baseline.lessons[f].context for f in baseline.false} != {rarest}
    for f in w.false:
        le = w.lessons[f]
        assert f"stack {rarest} " in le.text and le.hash == lesson_hash(KIND, le.text)
        assert f in w.by_context[rarest]
    # The honest world is the same draw as under collude: only the lies moved.
    assert {h: a.contexts for h, a in w.agents.items()} == {h: a.contexts for h, a in baseline.agents.items()}


def test_sybil_swarm_runs_ten_keys_per_honest_agent_and_every_one_supports_the_lies() -> None:
    w = _play("sybil-swarm", 5).w
    assert len(w.keys) - 30 == 10 * len(w.honest)
    shares = [len(w.sybils_of[a]) for a in w.adversaries]
    assert sum(shares) == 10 * len(w.honest) and max(shares) - min(shares) <= 1
    sybils = set(range(30, len(w.keys)))
    supporters = {signer for _, signer, kind, lesson, _ in _records(w)
                  if kind == CONFIRM and not w.lessons[lesson].true}
    assert sybils <= supporters


def test_lie_rarely_tells_few_lies_each_by_few_keys_and_echoes_the_truth() -> None:
    w = _play("lie-rarely", 10, agents=100).w
    keys = _adversary_keys(w)
    assert len(w.false) == 1  # max(1, round(0.02 * 30))
    records = _records(w)
    assert all(n is not None for *_, n in records)  # no forgeries
    f = w.false[0]
    liars = {signer for _, signer, kind, lesson, _ in records if lesson == f and kind in (CONFIRM, LESSON)}
    acted = {k for k in keys if f in w.acted[k]}
    assert len(acted) == len(keys)  # every key held it and decided, once
    assert 0.08 < len(liars - {w.false_author[f]}) / len(acted) < 0.25  # about lie_probability = 0.15
    for k in keys:
        echoed = {lesson for _, signer, kind, lesson, _ in records if signer == k and kind == CONFIRM}
        assert {le for le in w.acted[k] if w.lessons[le].true} <= echoed


def test_echo_supports_every_true_lesson_both_ways_and_forges_nothing() -> None:
    w = _play("echo", 5).w
    records = _records(w)
    assert all(n is not None for *_, n in records)
    by_key: dict[int, dict[int, set[int]]] = {}
    for _, signer, kind, lesson, _ in records:
        by_key.setdefault(signer, {}).setdefault(lesson, set()).add(kind)
    for k in _adversary_keys(w):
        true_acted = {le for le in w.acted[k] if w.lessons[le].true}
        assert true_acted
        assert all(by_key[k][le] == {CONFIRM, LESSON} for le in true_acted)


def test_backdate_dates_each_copy_before_the_earliest_honest_copy_and_the_records_are_valid() -> None:
    w = _play("backdate", 5).w
    adversary_keys = _adversary_keys(w)
    facts = [(int(w.ledger.column("origin")[r]), int(w.ledger.column("lesson")[r]), f)
             for r in range(len(w.ledger)) if (f := w.ledger.facts[r]) is not None and f.kind == "lesson"]
    honest_first: dict[int, datetime] = {}
    for origin, lesson, f in facts:
        if origin not in adversary_keys and w.lessons[lesson].true:
            honest_first[lesson] = min(f.at, honest_first.get(lesson, f.at))
    copies = [(origin, lesson, f) for origin, lesson, f in facts if origin in adversary_keys and w.lessons[lesson].true]
    assert copies and all(n is not None for *_, n in _records(w))  # every record parses
    assert all(f.at == honest_first[lesson] - timedelta(seconds=60) for _, lesson, f in copies)
    assert w.invalid_held(w.honest) == 0  # no forgeries


def test_back_dated_copies_of_true_lessons_do_not_buy_trust_for_a_lie() -> None:
    """Before first claims were ordered by when they were held, this run made its false lesson common at
    90 % of honest agents and no honest agent was counted by the others."""
    result = commons.run(commons.Options(agents=30, adversaries=0.3, nights=30, seed=2, trust="earned",
                                         world=WorldOptions(sybils_per_adversary=10), strategy="backdate",
                                         fading=False, quiet=True))
    assert result["false_common"] == 0 and result["false_common_peak_fraction"] == 0.0
    assert result["honest_uncounted"] <= 2


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_runs_the_experiment_reproducibly(strategy: str) -> None:
    def once() -> dict[str, object]:
        result = commons.run(commons.Options(agents=20, adversaries=0.3, nights=4, world=SMALL, config=SMALL_CONFIG,
                                             strategy=strategy, fading=False, quiet=True))
        return {k: v for k, v in result.items() if k != "wall_s"}

    first = once()
    assert first == once() and first["strategy"] == strategy and first["forged_held_by_honest"] == 0


def test_the_ceilings_bound_the_true_figure_and_corroboration_recovers_what_uncredited_honest_agents_confirm(
        ) -> None:
    """In the sweep's world at N = 30 (echo, seed 4) two honest agents never publish a lesson first, so
    under earned no other honest agent counts them.  Without corroboration the true lessons only they lift
    past support_n are lost, and the figure sits exactly on the ceiling the policy leaves; with it (the
    default) they corroborate, and the figure reaches the ceiling the world leaves, with no false lesson
    common.  Under any, everyone counts."""
    def run(trust: str, corroboration: int = 1) -> dict[str, object]:
        return commons.run(commons.Options(agents=30, adversaries=0.3, nights=30, seed=4, trust=trust,
                                           world=WorldOptions(sybils_per_adversary=10), strategy="echo",
                                           trust_config=TrustConfig(corroboration=corroboration),
                                           fading=False, quiet=True))

    def figures(result: dict[str, object]) -> tuple[float, float, float]:
        true, counted, witnessed = (result[k] for k in ("true_common_fraction", "true_counted_fraction",
                                                        "true_witnessed_fraction"))
        assert isinstance(true, float) and isinstance(counted, float) and isinstance(witnessed, float)
        return true, counted, witnessed

    before = run("earned", corroboration=0)
    assert before["honest_uncounted"] == before["honest_unheard"] == 2
    true, counted, witnessed = figures(before)
    assert true == counted < witnessed < 0.95
    after = run("earned")
    assert after["honest_uncounted"] == 2 and after["honest_unheard"] == 0
    assert figures(after) == (witnessed, witnessed, witnessed)
    assert after["false_common"] == 0 and after["false_common_peak_fraction"] == 0.0
    anyone = run("any")
    assert anyone["honest_uncounted"] == 0 and anyone["true_counted_fraction"] == anyone["true_witnessed_fraction"]


def test_an_unknown_strategy_is_refused_with_the_names() -> None:
    with pytest.raises(ValueError, match="collude"):
        commons.Run(commons.Options(agents=10, adversaries=0.3, nights=1, strategy="bribe"))


# -- the sweep ----------------------------------------------------------------------------------


def test_a_row_passes_only_when_every_seed_meets_every_target() -> None:
    def runs(*cells: tuple[float | None, int, float]) -> list[dict[str, object]]:
        return [{"true_common_fraction": t, "false_common": f, "false_common_peak_fraction": p, "wall_s": 1.0,
                 "sybils": 3} for t, f, p in cells]

    assert sweep.row("collude", 30, runs((1.0, 0, 0.0), (0.95, 0, 0.01)))["passed"]
    assert not sweep.row("collude", 30, runs((1.0, 0, 0.0), (0.94, 0, 0.0)))["passed"]
    assert sweep.row("refute-spam", 30, runs((1.0, 0, 0.0), (0.94, 0, 0.0)))["passed"]  # >= 0.90 there
    assert not sweep.row("refute-spam", 30, runs((0.89, 0, 0.0)))["passed"]
    assert not sweep.row("echo", 30, runs((1.0, 1, 0.0)))["passed"]
    assert not sweep.row("echo", 30, runs((1.0, 0, 0.011)))["passed"]
    assert not sweep.row("echo", 30, runs((None, 0, 0.0)))["passed"]
    row = sweep.row("echo", 30, runs((1.0, 0, 0.0), (0.5, 2, 0.3)))
    assert (row["true_common_fraction_min"], row["true_common_fraction_mean"], row["false_common_max"],
            row["false_common_peak_fraction_max"], row["seeds"]) == (0.5, 0.75, 2, 0.3, 2)


def test_a_sweep_that_meets_the_targets_passes() -> None:
    result = sweep.run(sweep.Options(agents=(20,), seeds=(1,), strategies=("collude",), trust="any", nights=8,
                                     sybils=1, adversaries=0.0, world=SMALL, workers=1, quiet=True))
    assert result["passed"] and result["rows"][0]["passed"]


def test_the_sweep_prints_its_table_writes_markdown_and_plots_and_fails_a_missed_target(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sweep", "--agents", "12,16", "--seeds", "1-2", "--strategies", "collude,refute-spam", "--nights", "3",
            "--sybils", "1", "--trust", "any", "--quiet", "--out", str(tmp_path)]
    assert main([*args, "--workers", "1"]) == 1  # 3 nights: no true lesson is common at 95 % yet
    table = capsys.readouterr().out
    rows = [line.strip() for line in table.splitlines() if line.strip().startswith(("collude", "refute-spam"))]
    assert len(rows) == 4 and all(line.endswith("FAIL") for line in rows)
    markdown = (tmp_path / "sweep.md").read_text()
    assert markdown.count("**FAIL**") == 4 and "| strategy | N |" in markdown
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "sweep-collude-n12.png", "sweep-collude-n16.png", "sweep-refute-spam-n12.png", "sweep-refute-spam-n16.png"]
    assert all(p.stat().st_size > 5000 for p in tmp_path.glob("*.png"))


def test_the_sweep_gives_the_same_figures_on_one_worker_and_on_two(capsys: pytest.CaptureFixture[str]) -> None:
    def figures(workers: str) -> object:
        main(["sweep", "--agents", "12,16", "--seeds", "1-2", "--strategies", "lie-rarely,sybil-swarm", "--nights",
              "3", "--sybils", "2", "--workers", workers, "--json", "--quiet", "--no-plots"])
        out = json.loads(capsys.readouterr().out)
        for cell in out["cells"]:
            del cell["wall_s"]
        return [out["cells"], [{k: v for k, v in r.items() if not k.startswith("wall")} for r in out["rows"]]]

    assert figures("1") == figures("2")


def test_sweep_arguments_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in (["--seeds", "0-3"], ["--agents", "30,30"], ["--strategies", "collude,bribe"], ["--seeds", "a"]):
        with pytest.raises(SystemExit):
            main(["sweep", *bad])
        assert "error" in capsys.readouterr().err


def test_an_out_folder_that_cannot_be_made_is_refused_before_any_run(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    # N = 1 000 over every strategy and seed: were it checked only after the runs, this would take the hour.
    assert main(["sweep", "--agents", "1000", "--out", str(blocker / "plots"), "--quiet"]) == 2
    assert "--out" in capsys.readouterr().err and not (blocker / "plots").exists()
