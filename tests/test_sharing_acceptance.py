"""The sharing acceptance scenario, through the command line as a user runs it.

Five memories A–E share one folder.  A meets the same error in two sessions, sleeps
and publishes; after a sync B–E hold the lesson as a candidate.  C, D and E meet that
error in their own sessions, sleep and confirm; after a sync every memory shows it
common with support 3.  91 days later with no new support it is fading everywhere.
A revokes it; after a sync it is gone everywhere, and an old A.jsonl copied back into
the folder does not bring it back.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from neverest.ctl import main

NAMES = "ABCDE"
ERROR = ["--kind", "error", "--title", "pip install -e .", "--happened", "fails without --no-build-isolation"]


class Net:
    def __init__(self, tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp, self.capsys, self.monkeypatch = tmp, capsys, monkeypatch
        self.folder = tmp / "shared"
        self.project = tmp / "project"
        self.project.mkdir()
        # The scenario shows the commons rule itself: three fresh memories' confirmations make a lesson
        # common.  Under the default policy ("vouched") no origin has a track record here yet.
        monkeypatch.setenv("NEVEREST_TRUST", "any")

    def at(self, when: str) -> None:
        self.monkeypatch.setenv("NEVEREST_NOW", when)

    def run(self, name: str, *argv: str) -> str:
        (self.tmp / name).mkdir(mode=0o700, exist_ok=True)  # a named home must exist
        status = main(["--home", str(self.tmp / name), *argv])
        out = self.capsys.readouterr().out
        assert status == 0, (name, argv, out)
        return out

    def sync_all(self) -> None:
        for _ in range(2):  # twice round, so that everyone reads what everyone wrote
            for name in NAMES:
                self.run(name, "folder", "sync", str(self.folder), "--json")

    def lesson(self, name: str) -> dict[str, object] | None:
        rows = [json.loads(line) for line in self.run(name, "lessons", "--json").splitlines()]
        rows = [r for r in rows if str(r["text"]).startswith("pip install")]
        assert len(rows) <= 1, rows
        return rows[0] if rows else None


def test_five_memories_share_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    net = Net(tmp_path, capsys, monkeypatch)
    cwd = ["--cwd", str(net.project)]

    net.at("2026-03-01T09:00:00Z")
    net.run("A", "remember", *ERROR, *cwd, "--session", "a1")
    net.run("A", "remember", *ERROR, *cwd, "--session", "a2")
    net.run("A", "publish", "--project", str(net.project))
    net.run("A", "sleep")
    origin_a = json.loads(net.run("A", "id", "--json"))["origin"]
    lesson = net.lesson("A")
    assert lesson is not None and lesson["state"] == "candidate" and lesson["support"] == 0

    net.sync_all()
    for name in "BCDE":
        held = net.lesson(name)
        assert held is not None and held["state"] == "candidate" and held["origin"] == origin_a, (name, held)
        assert held["hash"] == lesson["hash"] and held["strength"] == 0.5

    net.at("2026-03-02T03:00:00Z")
    for name in NAMES:  # the night after receipt: received candidates make their predictions
        net.run(name, "sleep")
    net.at("2026-03-03T10:00:00Z")
    for name in "CDE":
        net.run(name, "remember", *ERROR, "--session", f"{name}1")
    net.at("2026-03-04T03:00:00Z")
    for name in "CDE":
        report = json.loads(net.run(name, "sleep", "--json"))
        assert report["signed_confirmations"] == 1, (name, report)
    net.sync_all()
    for name in NAMES:
        held = net.lesson(name)
        assert held is not None and held["state"] == "common" and held["support"] == 3, (name, held)

    net.at("2026-06-03T03:00:00Z")  # 91 days after the last confirmation
    for name in NAMES:
        held = net.lesson(name)
        assert held is not None and held["state"] == "fading", (name, held)

    old_a = tmp_path / "old-A.jsonl"
    shutil.copy(net.folder / f"{origin_a}.jsonl", old_a)
    net.run("A", "revoke", str(lesson["hash"]))
    net.sync_all()
    for name in NAMES:
        assert net.lesson(name) is None, name
        shown = json.loads(net.run(name, "show", str(lesson["hash"]), "--json"))
        assert shown["state"] == "revoked" and shown["tombstone"] == "revoked", (name, shown)

    shutil.copy(old_a, net.folder / f"{origin_a}.jsonl")  # an old copy comes back by a slower path
    for name in "BCDE":
        net.run(name, "folder", "sync", str(net.folder))
        assert net.lesson(name) is None, name
