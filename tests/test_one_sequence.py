"""The CLI, the daemon and the simulator run the one sequence of the memory service.

The same shared folder (a lesson by one origin, confirmed by three others, and a second
lesson nobody confirmed) is synced three ways:

- ``neverestctl folder sync`` with no daemon (the CLI works on the store itself);
- ``neverestctl folder sync`` while ``neverestd`` runs (the CLI asks the daemon);
- ``Memory.sync(FolderTransport(...))`` on a ``:memory:`` store, as the simulator's agents call it.

Each must hold the same records, the same lessons and the same commons states, and the
two homes must have rendered the received common lesson at once (before this service
existed, a daemon synced a folder after it rendered, so ``lessons.md`` lagged a night).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neverest.clock import FixedClock, parse_time
from neverest.config import load_config
from neverest.control import ask
from neverest.ctl import main
from neverest.identity import Identity, load_or_create
from neverest.memory import holdings
from neverest.memory.service import Memory
from neverest.memory.states import verdict
from neverest.memory.store import Store, open_store
from neverest.records import sign_confirm, sign_lesson
from neverest.transports.adapters import FolderTransport

NOW = "2026-03-01T03:00:00Z"
CONFIG = 'trust = "any"\n'  # the rule under test is the sequence, not the trust policy


def _identity(name: str) -> Identity:
    return Identity.from_seed(hashlib.sha256(f"one-sequence/{name}".encode()).digest())


def _folder(tmp: Path) -> tuple[Path, str, str]:
    """A shared folder: X's lesson confirmed by Y, Z and W; X's second lesson unconfirmed."""
    folder = tmp / "shared"
    folder.mkdir()
    x = _identity("x")
    common = sign_lesson(x.signing_key, kind="error", text="pip install -e . fails without --no-build-isolation",
                         seen=2, strength=1.5, updated="2026-02-27T03:00:00.000000Z", seq=1)
    lonely = sign_lesson(x.signing_key, kind="surprise", text="The build cache is empty after the runner upgrade",
                         seen=1, strength=1.0, updated="2026-02-27T03:00:00.000000Z", seq=2)
    (folder / f"{x.origin}.jsonl").write_bytes(common.raw + b"\n" + lonely.raw + b"\n")
    for name in "yzw":
        who = _identity(name)
        confirm = sign_confirm(who.signing_key, common.target, at="2026-02-28T03:00:00.000000Z", seq=1)
        (folder / f"{who.origin}.jsonl").write_bytes(confirm.raw + b"\n")
    return folder, common.target, lonely.target


def _holding(store: Store, memory_origin: str, targets: list[str]) -> dict[str, Any]:
    """What a store holds, independent of whose store it is."""
    config = load_config(Path("/nonexistent"), env={"NEVEREST_TRUST": "any"})
    states = {}
    for target in targets:
        v = verdict(store.db, target, now=parse_time(NOW), config=config, own_origin=memory_origin)
        states[target] = (v.state, v.support)
    records = sorted(holdings.digest_of(h.raw) for t in targets for h in holdings.about(store.db, t))
    return {"states": states, "records": records}


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("NEVEREST_NOW", NOW)
    return os.environ | {"NEVEREST_NOW": NOW}


@contextlib.contextmanager
def running_daemon(home: Path, env: dict[str, str]) -> Iterator[Path]:
    """A real neverestd on ``home`` (loopback, no zeroconf) for the length of the block."""
    proc = subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(home), "--listen",
                             "127.0.0.1:0", "--no-mdns"], env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not (home / "control.sock").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.05)
        yield home
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def daemon_home(tmp_path: Path, env: dict[str, str]) -> Iterator[Path]:
    home = tmp_path / "with-daemon"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(CONFIG)
    with running_daemon(home, env):
        yield home


def test_cli_daemon_and_simulator_hold_the_same(tmp_path: Path, daemon_home: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    folder, common, lonely = _folder(tmp_path)
    targets = [common, lonely]

    # 1. The CLI, no daemon.
    alone = tmp_path / "alone"
    alone.mkdir(mode=0o700)
    (alone / "config.toml").write_text(CONFIG)
    shutil.copytree(folder, tmp_path / "copy1")
    assert main(["folder", "sync", str(tmp_path / "copy1"), "--home", str(alone), "--json"]) == 0

    # 2. The CLI with a daemon running: the daemon does the sync, then starts a gossip round.
    shutil.copytree(folder, tmp_path / "copy2")
    assert ask(daemon_home, {"op": "status"})["status"]["last_round"] is None
    assert main(["--home", str(daemon_home), "folder", "sync", str(tmp_path / "copy2"), "--json"]) == 0
    capsys.readouterr()
    deadline = time.monotonic() + 10
    while ask(daemon_home, {"op": "status"})["status"]["last_round"] is None:
        assert time.monotonic() < deadline, "no gossip round followed the daemon's sync"
        time.sleep(0.05)

    # 3. The simulator's call, on a store in memory.
    shutil.copytree(folder, tmp_path / "copy3")
    agent = _identity("agent")
    config = load_config(Path("/nonexistent"), env={"NEVEREST_TRUST": "any"})
    simulated = Memory(Store(Path(":memory:")), agent, config, FixedClock(parse_time(NOW)))
    simulated.sync(FolderTransport(tmp_path / "copy3"))

    held = []
    for home in (alone, daemon_home):
        with open_store(home) as store:
            held.append(_holding(store, load_or_create(home).origin, targets))
    held.append(_holding(simulated.store, agent.origin, targets))
    simulated.close()
    assert held[0] == held[1] == held[2]
    assert held[0]["states"] == {common: ("common", 3), lonely: ("candidate", 0)}

    # Rendered at once, in both homes: the common lesson is in what agents read.
    for home in (alone, daemon_home):
        rendered = [json.loads(line) for line in (home / "lessons.jsonl").read_text().splitlines()]
        assert common in {r["hash"] for r in rendered}, home
        assert "pip install" in (home / "lessons.md").read_text()


def test_a_daemons_night_judges_and_renders_what_its_folder_brought(tmp_path: Path, env: dict[str, str],
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A daemon with only a folder configured: the night syncs it, then judges and renders, so the
    lesson the folder brought is in lessons.md the same morning (it used to render first and lag a night)."""
    folder, common, _ = _folder(tmp_path)
    home = tmp_path / "nightly"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(CONFIG + f'folder = "{folder}"\n')
    with running_daemon(home, env):
        assert main(["--home", str(home), "sleep", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["folder"]["total"]["accepted"] == 5 and report["states"]
        rendered = [json.loads(line) for line in (home / "lessons.jsonl").read_text().splitlines()]
        assert common in {r["hash"] for r in rendered}
