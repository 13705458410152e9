"""Three neverestd on a LAN of network namespaces: they find each other by zeroconf and a
published lesson moves, with no peer configured by hand (skipped where namespaces cannot
be made).  Each daemon listens and runs zeroconf only on its namespace's address."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from neverest.control import ask, running
from neverest.ctl import main as ctl
from tests.netns import Lan
from tests.netns import namespace_lan as namespace_lan  # a fixture

ERROR = ["--kind", "error", "--title", "pip install -e .", "--happened", "fails without --no-build-isolation"]


def wait_for(predicate, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_daemons_on_a_lan_find_each_other_and_share(namespace_lan: Lan, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    homes = []
    for ns, address in namespace_lan.nodes.items():
        home = tmp_path / ns
        home.mkdir(mode=0o700)
        homes.append(home)
        namespace_lan.processes.append(subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "neverest.daemon", "--home", str(home),
             "--listen", f"{address}:7428", "--mdns-interface", address],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True))
    for home in homes:  # the control socket is a file: reachable from here, whatever the namespace
        wait_for(lambda h=home: running(h), 60)
    a, others = homes[0], homes[1:]

    def knows_both() -> bool:
        peers = ask(a, {"op": "status"})["status"]["peers"]
        return len({p["url"] for p in peers}) >= 2
    wait_for(knows_both, 30)

    project = tmp_path / "project"
    project.mkdir()
    for session in ("s1", "s2"):
        assert ctl(["--home", str(a), "remember", *ERROR, "--cwd", str(project), "--session", session]) == 0
    assert ctl(["--home", str(a), "publish", "--project", str(project)]) == 0
    capsys.readouterr()
    assert ctl(["--home", str(a), "sleep", "--json"]) == 0
    # No manual step: the daemon gossips what the sleep signed at once (a round follows every sleep).
    told = json.loads(capsys.readouterr().out)
    assert told["signed_lessons"] == 1
    deadline = time.monotonic() + 30
    while True:  # the round after the sleep may have found only one peer healthy yet: ask until in sync
        assert ctl(["--home", str(a), "gossip", "--json"]) == 0
        results = json.loads(capsys.readouterr().out)["round"]
        if len(results) == 2 and all(r["in_sync"] for r in results):
            break
        assert time.monotonic() < deadline, results
        time.sleep(0.1)
    origin_a = ask(a, {"op": "status"})["status"]["origin"]
    for home in others:
        assert ctl(["--home", str(home), "lessons", "--json"]) == 0
        held = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [(h["origin"], h["state"]) for h in held] == [(origin_a, "candidate")]
