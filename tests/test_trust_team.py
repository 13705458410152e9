"""Teams that trust each other (issue 24): ``neverestctl trust add/remove/list``, through the command
line as a person runs it, and what naming changes under the default policy (``earned``).

Nine fresh memories share one folder, all under the default policy.  A-E are a team: each names the
other four with ``trust add``.  S1-S4 are strangers that name nobody.  A meets an error, publishes;
B, C and D meet it in their own sessions and confirm.  S1 publishes a lesson the team never meets,
and S2-S4 confirm it (four strangers vouching for each other).  One prediction window after the
lessons were first held, A's lesson is common at every team member and S1's is common nowhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import nacl.signing
import pytest

from neverest.clock import iso
from neverest.config import Config
from neverest.ctl import main
from neverest.memory.receive import receive
from neverest.memory.states import trust_filter
from neverest.memory.store import open_store
from neverest.records import lesson_hash, origin_of, sign_confirm, sign_lesson
from tests.daemons import listening, spawn, stop

TEAM = "ABCDE"
STRANGERS = ("S1", "S2", "S3", "S4")
TEAM_ERROR = ["--kind", "error", "--title", "pip install -e .", "--happened", "fails without --no-build-isolation"]
CTL = (sys.executable, "-m", "neverest.ctl")
THEIR_ERROR = ["--kind", "error", "--title", "cargo build", "--happened", "fails unless the lockfile is deleted"]


class Net:
    def __init__(self, tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp, self.capsys, self.monkeypatch = tmp, capsys, monkeypatch
        self.folder = tmp / "shared"
        monkeypatch.delenv("NEVEREST_TRUST", raising=False)  # the default policy, earned

    def at(self, when: str) -> None:
        self.monkeypatch.setenv("NEVEREST_NOW", when)

    def call(self, name: str, *argv: str) -> tuple[int, str, str]:
        (self.tmp / name).mkdir(mode=0o700, exist_ok=True)
        status = main(["--home", str(self.tmp / name), *argv])
        captured = self.capsys.readouterr()
        return status, captured.out, captured.err

    def run(self, name: str, *argv: str) -> str:
        status, out, err = self.call(name, *argv)
        assert status == 0, (name, argv, out, err)
        return out

    def origin(self, name: str) -> str:
        return str(json.loads(self.run(name, "id", "--json"))["origin"])

    def sync_all(self, names: tuple[str, ...]) -> None:
        for _ in range(2):  # twice round, so that everyone reads what everyone wrote
            for name in names:
                self.run(name, "folder", "sync", str(self.folder), "--json")

    def lesson(self, name: str, title: str) -> dict[str, object] | None:
        rows = [json.loads(line) for line in self.run(name, "lessons", "--json").splitlines()]
        rows = [r for r in rows if str(r["text"]).startswith(title)]
        assert len(rows) <= 1, rows
        return rows[0] if rows else None

    def state(self, name: str, title: str) -> str | None:
        row = self.lesson(name, title)
        return None if row is None else str(row["state"])


def test_a_named_team_makes_its_lesson_common_after_one_window_and_strangers_never(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    net = Net(tmp_path, capsys, monkeypatch)
    everyone = (*TEAM, *STRANGERS)
    team_project, their_project = tmp_path / "app", tmp_path / "crate"
    team_project.mkdir()
    their_project.mkdir()
    net.at("2026-03-01T08:00:00Z")
    origins = {name: net.origin(name) for name in everyone}
    for name in TEAM:  # each member names the four others
        for other in TEAM:
            if other != name:
                net.run(name, "trust", "add", origins[other], "--note", f"team member {other}")
    listed = json.loads(net.run("A", "trust", "list", "--json"))
    assert listed["policy"] == "earned"
    assert {e["origin"]: (e["reasons"], e["note"]) for e in listed["origins"]} == {
        origins[o]: (["named"], f"team member {o}") for o in "BCDE"}

    net.at("2026-03-01T09:00:00Z")
    for name, error, project in (("A", TEAM_ERROR, team_project), ("S1", THEIR_ERROR, their_project)):
        for session in ("1", "2"):
            net.run(name, "remember", *error, "--cwd", str(project), "--session", name + session)
        net.run(name, "publish", "--project", str(project))
        net.run(name, "sleep")
    net.sync_all(everyone)
    net.at("2026-03-02T03:00:00Z")
    for name in everyone:  # the night after receipt: received candidates make their predictions
        net.run(name, "sleep")
    net.at("2026-03-03T10:00:00Z")
    for name, error in (*((n, TEAM_ERROR) for n in "BCD"), *((n, THEIR_ERROR) for n in ("S2", "S3", "S4"))):
        net.run(name, "remember", *error, "--session", f"{name}-own")
    net.at("2026-03-04T03:00:00Z")
    for name in ("B", "C", "D", "S2", "S3", "S4"):
        assert json.loads(net.run(name, "sleep", "--json"))["signed_confirmations"] == 1, name
    net.sync_all(everyone)

    # Three named supporters each, but every member first held the lesson on March 1: the quarantine (one
    # prediction window, 14 days) is not over.
    net.at("2026-03-14T12:00:00Z")
    assert {n: net.state(n, "pip install") for n in TEAM} == dict.fromkeys(TEAM, "candidate")
    net.at("2026-03-15T12:00:00Z")
    assert {n: net.state(n, "pip install") for n in TEAM} == dict.fromkeys(TEAM, "common")
    # The strangers' lesson, confirmed by three of them from their own sessions, is common nowhere: not at
    # the team (nobody there named them or bore out what they said) nor among themselves (each counts
    # only the one whose first claim it bore out itself).
    assert {n: net.state(n, "cargo build") for n in everyone} == dict.fromkeys(everyone, "candidate")
    held = net.lesson("A", "pip install")
    assert held is not None
    shown = json.loads(net.run("E", "show", str(held["hash"]), "--json"))
    assert shown["state"] == "common" and set(shown["supporters"]) == {origins[o] for o in "BCD"}

    # A stops naming C and D: at A, B alone is named, and the lesson falls back to a candidate.
    for other in "CD":
        net.run("A", "trust", "remove", origins[other])
    assert net.state("A", "pip install") == "candidate"
    assert net.state("B", "pip install") == "common"


def test_the_command_validates_names_and_keeps_the_config_as_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    net = Net(tmp_path, capsys, monkeypatch)
    own = net.origin("A")
    config = tmp_path / "A" / "config.toml"
    text = '# my settings\ntrust_allow = "aaaaaaaaaaaaaaaa"  # the build box\nsupport_n = 3\n'
    config.write_text(text)
    for bad in ("xyz", "3f9a0c1b2d4e5f6", "3f9a0c1b2d4e5f6g", "3f9a0c1b2d4e5f600"):
        status, _, err = net.call("A", "trust", "add", bad)
        assert status == 2 and "is not an origin id" in err and "16 hex digits" in err, (bad, err)
    status, _, err = net.call("A", "trust", "add", own)
    assert status == 2 and "own origin" in err
    added = json.loads(net.run("A", "trust", "add", "3F9A0C1B2D4E5F60", "--note", "Ana's laptop", "--json"))
    assert added == {"origin": "3f9a0c1b2d4e5f60", "new": True, "note": "Ana's laptop"}
    again = json.loads(net.run("A", "trust", "add", "3f9a0c1b2d4e5f60", "--json"))
    assert again["new"] is False
    out = net.run("A", "trust", "list")
    assert "3f9a0c1b2d4e5f60  counts        named by you" in out and "(Ana's laptop)" in out  # the note is kept
    assert "aaaaaaaaaaaaaaaa  counts        named in config.toml (trust_allow)" in out
    # An origin named in the config is not the command's to remove; one never named is not either.
    status, _, err = net.call("A", "trust", "remove", "aaaaaaaaaaaaaaaa")
    assert status == 1 and "config.toml" in err
    status, _, err = net.call("A", "trust", "remove", "bbbbbbbbbbbbbbbb")
    assert status == 1 and "not named here" in err
    assert net.run("A", "trust", "remove", "3f9a0c1b2d4e5f60").startswith("no longer named")
    assert config.read_text() == text  # the person's file, byte for byte
    assert json.loads(net.run("A", "trust", "list", "--json"))["origins"] == [
        {"origin": "aaaaaaaaaaaaaaaa", "reasons": ["config"], "counts": True, "corroborates": False, "note": "",
         "added": None, "trust": 0.5, "first_claims": 0, "borne": 0, "via": None}]


def test_the_policy_reads_the_names_at_every_call(tmp_path: Path) -> None:
    """The daemon keeps one Config for its life and judges through trust_filter at every pass: a name
    written to the store counts at the next pass, with no restart."""
    config, own = Config(), "f" * 16
    with open_store(tmp_path) as store:
        before = trust_filter(store.db, config, own)
        with store.write() as db:
            db.execute("INSERT INTO trusted (origin, note, added) VALUES ('aaaaaaaaaaaaaaaa', '', '2026-03-01')")
        after = trust_filter(store.db, config, own)
    assert not before("aaaaaaaaaaaaaaaa") and after("aaaaaaaaaaaaaaaa")


def test_trust_add_goes_through_a_running_daemon(tmp_path: Path) -> None:
    """With a daemon running, trust add and remove are made by the daemon (the one writer), which judges
    again at once; the daemon keeps running (same pid)."""
    home = tmp_path / "home"
    env = dict(os.environ, NEVEREST_NOW="2026-03-01T09:00:00Z")
    subprocess.run([*CTL, "--home", str(home), "init"], check=True, env=env, capture_output=True)
    proc = spawn(home, "2026-03-01T09:00:00Z")
    try:
        listening(home, proc)

        def ctl(*argv: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*CTL, "--home", str(home), *argv], env=env, capture_output=True,
                                  text=True, timeout=60)

        pid = json.loads(ctl("status", "--json").stdout)["daemon"]["pid"]
        added = ctl("trust", "add", "3f9a0c1b2d4e5f60", "--note", "build box", "--json")
        assert added.returncode == 0 and json.loads(added.stdout)["new"] is True, added.stderr
        bad = ctl("trust", "add", "nope")
        assert bad.returncode == 2 and "is not an origin id" in bad.stderr
        listed = json.loads(ctl("trust", "list", "--json").stdout)["origins"]
        assert [(e["origin"], e["note"]) for e in listed] == [("3f9a0c1b2d4e5f60", "build box")]
        assert ctl("trust", "remove", "3f9a0c1b2d4e5f60").returncode == 0
        assert json.loads(ctl("status", "--json").stdout)["daemon"]["pid"] == pid == proc.pid
    finally:
        stop([proc])


def test_list_says_why_each_origin_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Every reason, from records received by the real receive function: p published first a lesson this
    memory learned later itself (earned); n is named and bore out x's first claim (x: from a trusted memory,
    through n); c bore out x's first claim too, after n (corroborates); q is a peer added by hand."""
    net = Net(tmp_path, capsys, monkeypatch)
    net.at("2026-03-20T09:00:00Z")
    own = net.origin("A")
    keys = {name: nacl.signing.SigningKey(bytes([k + 40]) * 32) for k, name in enumerate("pnxcq")}
    o = {name: origin_of(bytes(key.verify_key)) for name, key in keys.items()}
    mine, theirs = "npm ci fails behind the proxy", "tsc reports a stale schema after a rebase"
    day = [iso(datetime(2026, 3, d, tzinfo=UTC)) for d in range(1, 8)]
    records = [sign_lesson(keys["p"], kind="error", text=mine, seen=1, strength=1.0, updated=day[0], seq=1).raw,
               sign_lesson(keys["x"], kind="error", text=theirs, seen=1, strength=1.0, updated=day[0], seq=1).raw,
               sign_confirm(keys["n"], lesson_hash("error", theirs), at=day[1], seq=1).raw,
               sign_confirm(keys["c"], lesson_hash("error", theirs), at=day[2], seq=1).raw]
    with open_store(tmp_path / "A") as store:
        for k, raw in enumerate(records):  # one by one: each is first held when it is received
            receive(store, [raw], source="t", own_origin=own, config=Config(),
                    now=datetime(2026, 3, 1 + k, 12, tzinfo=UTC))
        with store.write() as db:
            db.execute("INSERT INTO lessons (hash, kind, text, strength, seen, created, updated) "
                       "VALUES (?, 'error', ?, 1.5, 2, ?, ?)", (lesson_hash("error", mine), mine, day[5], day[5]))
            db.execute("INSERT INTO peers (origin, source) VALUES (?, 'manual')", (o["q"],))
    net.run("A", "trust", "add", o["n"], "--note", "Ana")
    listed = {e["origin"]: e for e in json.loads(net.run("A", "trust", "list", "--json"))["origins"]}
    assert {origin: (e["reasons"], e["counts"], e["corroborates"]) for origin, e in listed.items()} == {
        o["n"]: (["named"], True, False), o["p"]: (["earned"], True, False),
        o["x"]: (["from a trusted memory"], True, False), o["c"]: (["corroborates"], False, True),
        o["q"]: (["peer"], False, False)}
    assert listed[o["p"]]["first_claims"] == 1 and listed[o["x"]]["via"] == o["n"] and listed[o["c"]]["borne"] == 1
    text = net.run("A", "trust", "list")
    assert [line.split()[:2] for line in text.splitlines()] == [
        [o["n"], "counts"], [o["p"], "counts"], [o["x"], "counts"], [o["c"], "corroborates"], [o["q"], "room"]]
    assert f"passed on mostly by {o['n']}" in text and "peer added by hand" in text
