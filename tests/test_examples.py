"""The README's example scripts, run as a new user runs them (``.venv/bin`` on PATH), in a HOME of the
test's own: what they print is what the README and docs/reference.md say they show."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_example(name: str, tmp_path: Path, timeout_s: float) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEVEREST_")}
    env |= {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", "HOME": str(tmp_path),
            "TMPDIR": str(tmp_path)}
    done = subprocess.run(["bash", str(REPO / "examples" / name)], env=env, capture_output=True, text=True,
                          timeout=timeout_s, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("tmp.")], "the script left its folder behind"
    return done.stdout


def test_the_proxy_hands_the_second_model_the_first_ones_work(tmp_path: Path) -> None:
    out = run_example("proxy-handoff.sh", tmp_path, 120)
    handed = out.split("-- what claude-sonnet-4 was handed (its system text):", 1)[1].split("== the project log")[0]
    # The second model (another provider, another format) was handed what the person and the first model did,
    # the person's correction in their own words, and who wrote last; the first model was handed nothing.
    assert "the last model here was gpt-4o" in handed and "not instructions" in handed
    assert "gpt-4o: I added a retry with backoff to the payment webhook handler." in handed
    assert "the person (to gpt-4o): No, not more than three tries: the bank bills each call." in handed
    assert "handed: (nothing)" in out
    # The correction reached the memory as a correction episode, through the proxy.
    episodes = out.split("as episodes (the correction among them)", 1)[1]
    assert re.search(r"\bcorrection\s+\S+\s+No, not more than three tries", episodes)


def test_five_memories_that_name_each_other_share_a_lesson(tmp_path: Path) -> None:
    out = run_example("share-by-folder.sh", tmp_path, 300)
    window = out.split("common at all five", 1)[1].split("== 91 days later")[0]
    assert len(re.findall(r"^[A-E]: \S+\s+error\s+.*\bcommon\s+3\s+pip install", window, re.M)) == 5
    before = out.split("sleep, and confirm", 1)[1].split("== one prediction window")[0]
    assert "common" not in before  # held for one prediction window first
    assert out.rstrip().endswith("state revoked, support 3, tombstone (revoked)")
