"""Refutations signed by the night, from the verify pass only, on real stores: only when a received
lesson's situation arose here (the hook brought it into a session) and it did not hold (a later surprise
in that session expected what it says); never for lack of occasion, never for this memory's own
lessons, once per lesson; and ``neverestctl show`` / ``status`` show them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nacl.signing
import pytest

from neverest.clock import FixedClock, iso
from neverest.config import Config
from neverest.ctl import main
from neverest.memory import holdings
from neverest.memory.queries import injections
from neverest.memory.receive import receive
from neverest.memory.service import Memory
from neverest.memory.states import trust_filter
from neverest.records import Record, lesson_hash, origin_of, parse, sign_confirm, sign_lesson

T0 = datetime(2026, 3, 2, 3, 0, tzinfo=UTC)
DAY, HOUR = timedelta(days=1), timedelta(hours=1)
PUBLISHER = nacl.signing.SigningKey(b"\x11" * 32)
ERROR = "pytest fails: No module named foo"
SURPRISE = "Expected the build to reuse the cache, but it rebuilt every target from scratch"


class Here:
    """One memory in a home of its own, with a clock the test moves."""

    def __init__(self, home: Path, config: Config | None = None) -> None:
        self.clock = FixedClock(T0)
        self.memory = Memory.open(home, config or Config(), self.clock)

    def receive(self, kind: str, text: str, key: nacl.signing.SigningKey = PUBLISHER, seq: int = 1,
                confirmers: int = 0) -> str:
        """A lesson received from ``key``, confirmed by ``confirmers`` other origins (each adds strength)."""
        record = sign_lesson(key, kind=kind, text=text, seen=2, strength=1.0, updated=iso(self.clock.now()), seq=seq)
        confirms = [sign_confirm(nacl.signing.SigningKey(bytes([0x40 + k]) * 32), record.target,
                                 at=iso(self.clock.now())).raw for k in range(confirmers)]
        got = receive(self.memory.store, [record.raw, *confirms], source="folder:x",
                      own_origin=self.memory.identity.origin, config=self.memory.config, now=self.clock.now())
        assert got.accepted == 1 + confirmers, got
        return record.target

    def night(self, at: datetime) -> dict[str, Any]:
        self.clock.set(at)
        return self.memory.night()

    def inject(self, session: str, digest: str, at: datetime, *, held_out: bool = False) -> None:
        """What the hook logs when it brings a lesson into a session (agents/hook.py)."""
        with self.memory.store.write() as db:
            injections.add_session(db, session, held_out=held_out, cwd="", at=iso(at))
            injections.log(db, session, [digest], event="UserPromptSubmit", at=iso(at), held_out=held_out)

    def event(self, at: datetime, **fields: str) -> None:
        self.clock.set(at)
        result = self.memory.ingest([fields | {"agent": "claude-code", "at": iso(at)}])
        assert result.stored == 1, result

    def refutations(self) -> list[Record]:
        return [parse(h.raw) for h in holdings.of_origin(self.memory.store.db, self.memory.identity.origin)
                if h.type == "refute"]

    def outcomes(self) -> list[str | None]:
        return [r[0] for r in self.memory.store.db.execute("SELECT outcome FROM predictions ORDER BY id")]

    def strength(self, digest: str) -> float:
        return float(self.memory.store.db.execute("SELECT strength FROM lessons WHERE hash = ?", (digest,))
                     .fetchone()[0])


@pytest.fixture
def here(tmp_path: Path) -> Here:
    return Here(tmp_path / "home")


def test_a_received_lesson_met_and_contradicted_in_a_session_is_refuted_and_signed(here: Here) -> None:
    digest = here.receive("error", ERROR)
    assert here.night(T0)["predicted"] == 1
    here.inject("s1", digest, T0 + DAY)
    here.event(T0 + DAY + HOUR, kind="surprise", session="s1", expected="pytest to fail with No module named foo",
               happened="pytest passed: foo is installed in the image now")
    before = here.strength(digest)
    report = here.night(T0 + 2 * DAY)
    assert [r["hash"] for r in report["refuted"]] == [digest] and report["signed_refutations"] == 1
    assert report["confirmed"] == [] and report["failed"] == []
    assert here.outcomes() == ["refuted", None]  # and the next night's prediction is open
    # Weakened like a failure (the night's decay is 0 days: the same strength minus the step).
    assert here.strength(digest) == pytest.approx(before - here.memory.config.fail_step)
    [record] = here.refutations()
    assert (record.type, record.target, record.fields["at"]) == ("refute", digest, iso(T0 + 2 * DAY))
    assert record.seq == 1  # the night's first signed record: refutations go first
    assert holdings.refuters(here.memory.store.db, digest) == [here.memory.identity.origin]


def test_a_prediction_that_found_no_occasion_fails_and_refutes_nothing(here: Here) -> None:
    digest = here.receive("error", ERROR)
    here.night(T0)
    # A surprise expecting what the lesson says, but in a session the lesson was never brought into.
    here.event(T0 + DAY, kind="surprise", session="s9", expected="pytest to fail with No module named foo",
               happened="pytest passed")
    assert here.night(T0 + 2 * DAY)["refuted"] == []
    report = here.night(T0 + 14 * DAY)
    assert len(report["failed"]) == 1 and report["refuted"] == [] and report["signed_refutations"] == 0
    assert here.outcomes()[0] == "failed" and here.refutations() == []
    assert digest


def test_the_situation_must_arise_before_the_surprise_in_that_same_session(here: Here) -> None:
    digest = here.receive("error", ERROR)
    here.night(T0)
    here.event(T0 + DAY, kind="surprise", session="s1", expected="pytest to fail with No module named foo",
               happened="pytest passed")
    here.inject("s1", digest, T0 + DAY + HOUR)  # brought in after the surprise
    here.inject("s2", digest, T0 + DAY - HOUR)  # another session, where nothing surprising happened
    assert here.night(T0 + 2 * DAY)["refuted"] == [] and here.refutations() == []


def test_a_surprise_that_did_not_contradict_the_lesson_refutes_nothing(here: Here) -> None:
    digest = here.receive("error", ERROR)
    here.night(T0)
    here.inject("s1", digest, T0 + DAY)
    # What happened is what the lesson says: it held, whatever the agent expected.
    here.event(T0 + DAY + HOUR, kind="surprise", session="s1", expected="pytest fails: No module named foo",
               happened="pytest fails: No module named foo, again")
    # An unrelated surprise in the same session.
    here.event(T0 + DAY + 2 * HOUR, kind="surprise", session="s1", expected="the linter to pass",
               happened="the linter flagged an unused import")
    assert here.night(T0 + 2 * DAY)["refuted"] == [] and here.refutations() == []


def test_a_session_held_out_is_a_situation_that_arose_too(here: Here) -> None:
    """Withheld from a held-out session, the lesson bore on its moment all the same, and the agent (not told)
    expected what it says: the test is as good, and no better."""
    digest = here.receive("error", ERROR)
    here.night(T0)
    here.inject("s1", digest, T0 + DAY, held_out=True)
    here.event(T0 + DAY + HOUR, kind="surprise", session="s1", expected="pytest to fail with No module named foo",
               happened="pytest passed")
    assert here.night(T0 + 2 * DAY)["signed_refutations"] == 1


def test_a_surprise_lesson_is_refuted_by_the_reverse_surprise_and_confirmed_by_the_same(here: Here,
                                                                                        tmp_path: Path) -> None:
    """"Expected X, but Y" says Y happens.  Expecting Y and meeting X refutes it, though the words are the
    same as a confirming surprise's (a bag of words cannot tell them apart): the refuting surprise is not
    also taken for a hit."""
    digest = here.receive("surprise", SURPRISE)
    here.night(T0)
    here.inject("s1", digest, T0 + DAY)
    here.event(T0 + DAY + HOUR, kind="surprise", session="s1", expected="the build rebuilds every target from scratch",
               happened="the build reused the cache")
    report = here.night(T0 + 2 * DAY)
    assert len(report["refuted"]) == 1 and report["confirmed"] == []

    other = Here(tmp_path / "other")
    digest = other.receive("surprise", SURPRISE)
    other.night(T0)
    other.inject("s1", digest, T0 + DAY)
    other.event(T0 + DAY + HOUR, kind="surprise", session="s1", expected="the build to reuse the cache",
                happened="it rebuilt every target from scratch")
    report = other.night(T0 + 2 * DAY)
    assert report["refuted"] == [] and len(report["confirmed"]) == 1 and report["signed_confirmations"] == 1


def test_the_first_test_decides_between_a_confirmation_and_a_refutation(here: Here) -> None:
    digest = here.receive("error", ERROR)
    here.night(T0)
    here.event(T0 + DAY, kind="error", session="s0", title="pytest", happened="fails: No module named foo")
    here.inject("s1", digest, T0 + DAY + HOUR)
    here.event(T0 + DAY + 2 * HOUR, kind="surprise", session="s1", expected="pytest to fail with No module named foo",
               happened="pytest passed")
    report = here.night(T0 + 2 * DAY)
    assert len(report["confirmed"]) == 1 and report["refuted"] == [] and here.refutations() == []


def test_this_memorys_own_lessons_are_never_refuted(here: Here) -> None:
    for session in ("a", "b"):
        here.event(T0 - HOUR, kind="error", session=session, title="pytest", happened="fails: No module named foo")
    report = here.night(T0)
    [learned] = report["learned"]
    digest = str(here.memory.store.db.execute("SELECT hash FROM lessons WHERE id = ?", (learned["id"],))
                 .fetchone()[0])
    here.inject("s1", digest, T0 + DAY)
    here.event(T0 + DAY + HOUR, kind="surprise", session="s1", expected="pytest fails: No module named foo",
               happened="pytest passed")
    report = here.night(T0 + 2 * DAY)
    assert report["refuted"] == [] and here.refutations() == [] and "refuted" not in here.outcomes()


def test_a_received_lesson_this_memory_published_too_is_not_refuted_on_the_wire(here: Here) -> None:
    digest = here.receive("error", ERROR)
    mine = sign_lesson(here.memory.identity.signing_key, kind="error", text=ERROR, seen=1, strength=1.0,
                       updated=iso(T0), seq=1)
    with here.memory.store.write() as db:
        holdings.put(db, mine, source=holdings.OWN_SOURCE, now=T0)
    here.night(T0)
    here.inject("s1", digest, T0 + DAY)
    here.event(T0 + DAY + HOUR, kind="surprise", session="s1", expected="pytest to fail with No module named foo",
               happened="pytest passed")
    report = here.night(T0 + 2 * DAY)
    assert len(report["refuted"]) == 1 and report["signed_refutations"] == 0 and here.refutations() == []


def test_one_refutation_per_lesson_however_often_it_fails_here(here: Here) -> None:
    digest = here.receive("error", ERROR, confirmers=4)  # strong enough here to be refuted three times
    here.night(T0)
    for k, day in enumerate((1, 3, 5)):
        at = T0 + day * DAY
        here.inject(f"s{k}", digest, at)
        here.event(at + HOUR, kind="surprise", session=f"s{k}", expected="pytest to fail with No module named foo",
                   happened=f"pytest passed on try {k}")
        report = here.night(at + DAY)
        assert len(report["refuted"]) == 1 and report["signed_refutations"] == (1 if k == 0 else 0)
    assert len(here.refutations()) == 1 and here.outcomes().count("refuted") == 3


def test_this_memory_signs_no_more_refutations_than_receivers_keep_of_one_origin(tmp_path: Path) -> None:
    here = Here(tmp_path / "home", Config(refute_origin_max=1))
    texts = [ERROR, "cargo build fails: linker cc not found"]
    digests = [here.receive("error", text, seq=seq) for seq, text in enumerate(texts, start=1)]
    here.night(T0)
    for k, (digest, expected) in enumerate(zip(digests, ("pytest to fail with No module named foo",
                                                         "cargo build to fail with linker cc not found"),
                                               strict=True)):
        here.inject(f"s{k}", digest, T0 + DAY)
        here.event(T0 + DAY + HOUR, kind="surprise", session=f"s{k}", expected=expected, happened="it worked")
    report = here.night(T0 + 2 * DAY)
    assert len(report["refuted"]) == 2 and report["signed_refutations"] == 1 and len(here.refutations()) == 1


def test_show_lists_the_refuters_and_status_counts_them(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    here = Here(home)
    digest = here.receive("error", ERROR)
    here.night(T0)
    here.inject("s1", digest, T0 + DAY)
    here.event(T0 + DAY + HOUR, kind="surprise", session="s1", expected="pytest to fail with No module named foo",
               happened="pytest passed")
    here.night(T0 + 2 * DAY)
    here.memory.close()
    monkeypatch.setenv("NEVEREST_NOW", iso(T0 + 2 * DAY))
    assert main(["--home", str(home), "show", digest[:8], "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    origin = json.loads(_run(capsys, home, "id", "--json"))["origin"]
    assert shown["refuted_by"] == [origin] and shown["publishers"] == [origin_of(bytes(PUBLISHER.verify_key))]
    assert {r["type"] for r in shown["records"]} == {"lesson", "refute"}
    assert main(["--home", str(home), "show", digest[:8]]) == 0
    assert f"refuted by: {origin}" in capsys.readouterr().out
    status = json.loads(_run(capsys, home, "status", "--json"))
    assert status["refutations"] == {"held": 1, "refused": {}}
    assert "refutations  1 held" in _run(capsys, home, "status")
    assert digest == lesson_hash("error", ERROR)


def _run(capsys: pytest.CaptureFixture[str], home: Path, *argv: str) -> str:
    assert main(["--home", str(home), *argv]) == 0
    return capsys.readouterr().out


def test_a_lesson_refuted_here_counts_against_its_supporters_as_a_failure_did(here: Here) -> None:
    """The vouched policy reads failures; a refuted prediction is one, with evidence."""
    liar = nacl.signing.SigningKey(b"\x22" * 32)
    liar_origin = origin_of(bytes(liar.verify_key))
    true_one = here.receive("error", "cargo build fails: linker cc not found", key=liar)
    false_one = here.receive("error", ERROR, key=liar, seq=2)
    here.night(T0)
    here.event(T0 + DAY, kind="error", session="s0", title="cargo build", happened="fails: linker cc not found")
    here.inject("s1", false_one, T0 + DAY)
    here.event(T0 + DAY + HOUR, kind="surprise", session="s1", expected="pytest to fail with No module named foo",
               happened="pytest passed")
    report = here.night(T0 + 2 * DAY)
    [confirmed] = report["confirmed"]
    assert here.memory.store.db.execute("SELECT hash FROM lessons WHERE id = ?", (confirmed["lesson"],)
                                        ).fetchone() == (true_one,)
    assert [r["hash"] for r in report["refuted"]] == [false_one]
    config = Config(vouch_min_verified=1, vouch_min_resolved=1)
    counts = trust_filter(here.memory.store.db, config, here.memory.identity.origin)
    assert not counts(liar_origin)
