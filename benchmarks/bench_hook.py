"""Benchmark: the Claude Code hook as the whole process the agent runs, against ``python -c pass``.

Target (docs/figures.md): p95 of each of SessionStart, UserPromptSubmit and PreToolUse ≤ 2.5 × the
p95 of ``python -c pass`` in the same run (same interpreter, same site packages).  The store holds
``--lessons`` lessons (this memory's own, in ``--projects`` projects, a few received ones in state
common) and ``--episodes`` episodes.  Every run is a new session with holdout 0, so every run that
finds a lesson writes its injection log: the costly case.  The runs of the four commands are
interleaved so that a noisy neighbour weighs on all of them alike.  The first call, which judges
the commons state of the received lessons and keeps it (the slow path), is reported on its own.

    python benchmarks/bench_hook.py [--lessons 1000] [--episodes 1000] [--runs 30] [--json]
        [--embed-url URL --embed-model NAME]

With ``--embed-url`` and ``--embed-model`` the model is configured in the home's config.toml and the lessons are
embedded in its space before the runs (as a sleep would), so UserPromptSubmit asks the model for the prompt's
vector (neverest/agents/hook_model.py); the prompt is also timed with the model gone (the configuration pointing
at a port where nothing listens, the lessons still in the model's space), each call finding it down (the latch
that spares the calls after a failure removed before each), the fall back to the hashed space.  The 2.5 ×
target is checked on the runs without a model.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nacl.signing

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_episodes import FAILURES, SAID, TOOLS, events

from neverest.agents.hook_model import LATCH_FILE
from neverest.clock import iso
from neverest.config import Config
from neverest.memory.embed import HASHED_SPACE, ModelEmbedder, hashed_vector, to_blob
from neverest.memory.events import ingest
from neverest.memory.model import Endpoint
from neverest.memory.queries import lessons
from neverest.memory.receive import receive
from neverest.memory.sleep import embed_rows
from neverest.memory.store import open_store
from neverest.records import lesson_hash, sign_confirm, sign_lesson

NOW = datetime(2026, 9, 20, tzinfo=UTC)
RECEIVED = 10


def build(home: Path, n_lessons: int, n_episodes: int, projects: int) -> None:
    rng = random.Random(7)
    store = open_store(home)
    ingest(store, events(n_episodes, datetime(2026, 9, 1, tzinfo=UTC), 19), now=NOW)
    seen: set[str] = set()
    with store.write() as db:
        while len(seen) < n_lessons:
            if rng.random() < 0.8:
                kind, text = "error", f"{rng.choice(TOOLS)} {rng.choice(FAILURES)} in module {rng.randrange(60)}"
            else:
                kind, text = "correction", f"{rng.choice(SAID)} for part {rng.randrange(200)}"
            digest = lesson_hash(kind, text)
            if digest in seen:
                continue
            seen.add(digest)
            lessons.create(db, lessons.NewLesson(
                hash=digest, kind=kind, text=text, cwd=f"/src/proj{rng.randrange(projects)}",
                strength=round(rng.uniform(0.5, 2.0), 3), seen=2, created=iso(NOW), origin="", layer="personal",
                space="hashed-256", embedding=to_blob(hashed_vector(text)), centroid=None))
    keys = [nacl.signing.SigningKey(bytes([i]) * 32) for i in range(40, 44)]
    records = []
    for i in range(RECEIVED):
        text = f"On the shared runners {TOOLS[i]} {FAILURES[i]}"
        records.append(sign_lesson(keys[0], kind="error", text=text, seen=1, strength=1.0, updated=iso(NOW),
                                   seq=i + 1).raw)
        records += [sign_confirm(k, lesson_hash("error", text), at=iso(NOW)).raw for k in keys[1:]]
    receive(store, records, source="bench", own_origin="f" * 16, config=Config(trust="any"), now=NOW)
    store.close()


def embed_lessons(home: Path, url: str, model: str) -> None:
    """The model configured, and the lessons moved into its space as the next sleep would move them (a model
    that does not answer leaves them hashed: the hook then has nothing to ask it for)."""
    with (home / "config.toml").open("a") as config:
        config.write(f'embed_url = "{url}"\nembed_model = "{model}"\n')
    store = open_store(home)
    with ModelEmbedder(Endpoint(url, model)) as embedder:
        if embedder.probe() != HASHED_SPACE:
            embed_rows(store, embedder, "lessons", stop_on_fallback=True)
    store.close()


def payloads(session: str) -> dict[str, dict[str, Any]]:
    base = {"session_id": session, "transcript_path": "/nonexistent.jsonl", "cwd": "/src/proj3"}
    return {
        "SessionStart": base | {"hook_event_name": "SessionStart", "source": "startup"},
        "UserPromptSubmit": base | {"hook_event_name": "UserPromptSubmit",
                                    "prompt": "pip install fails behind the proxy again, can you look at it?"},
        "PreToolUse": base | {"hook_event_name": "PreToolUse", "tool_name": "Bash",
                              "tool_input": {"command": "npm ci --prefer-offline", "description": "install"}},
    }


def timed(argv: list[str], data: bytes, env: dict[str, str]) -> tuple[float, bytes]:
    started = time.perf_counter()
    done = subprocess.run(argv, input=data, capture_output=True, env=env, check=True, timeout=60)
    return time.perf_counter() - started, done.stdout


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lessons", type=int, default=1000)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--projects", type=int, default=7)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--embed-url", default="")
    parser.add_argument("--embed-model", default="")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        (home / "config.toml").write_text('trust = "any"\n')
        build(home, args.lessons, args.episodes, args.projects)
        homes = {"": home}
        if args.embed_url:
            # The same memory twice more: with the model (its lessons in its space), and with the model gone.
            homes["model"] = Path(tmp) / "model"
            shutil.copytree(home, homes["model"])
            embed_lessons(homes["model"], args.embed_url, args.embed_model)
            homes["model down"] = Path(tmp) / "down"
            shutil.copytree(homes["model"], homes["model down"])
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            config = homes["model down"] / "config.toml"
            config.write_text(config.read_text().replace(args.embed_url, f"http://127.0.0.1:{port}/v1"))
        env = {name: os.environ | {"NEVEREST_HOME": str(h), "NEVEREST_NOW": iso(NOW), "NEVEREST_HOLDOUT": "0"}
               for name, h in homes.items()}
        # What the console script neverest-hook runs (as pip writes it), without runpy's cost of -m.
        hook = [sys.executable, "-c", "import sys; from neverest.agents.hook import entry; sys.exit(entry())"]
        first, out = timed(hook, json.dumps(payloads("warm-up")["UserPromptSubmit"]).encode(), env[""])
        for name in homes:
            if name:
                timed(hook, json.dumps(payloads("warm-up")["UserPromptSubmit"]).encode(), env[name])
        # Every event without a model; with one, the prompt (the only event that asks it).
        rows = [(name, "") for name in payloads("x")] + [("UserPromptSubmit", h) for h in homes if h]
        label = {row: row[0] + (f", {row[1]}" if row[1] else "") for row in rows}
        answered = {label[row]: 0 for row in rows}
        times: dict[str, list[float]] = {"python -c pass": []} | {label[row]: [] for row in rows}
        for run in range(args.runs):
            took, _ = timed([sys.executable, "-c", "pass"], b"", env[""])
            times["python -c pass"].append(took)
            for event, where in rows:
                if where == "model down":  # each call finds the model down (not the failure of a call before)
                    (homes[where] / LATCH_FILE).unlink(missing_ok=True)
                took, out = timed(hook, json.dumps(payloads(f"bench-{run}")[event]).encode(), env[where])
                times[label[event, where]].append(took)
                answered[label[event, where]] += bool(out)
    base = p95(times["python -c pass"])
    result: dict[str, Any] = {"lessons": args.lessons, "episodes": args.episodes, "runs": args.runs,
                              "model": args.embed_model if args.embed_url else "",
                              "first_call_ms": round(first * 1000, 1), "p95_ms": {}, "median_ms": {}, "ratio_p95": {},
                              "answered": answered}
    for name, values in times.items():
        result["p95_ms"][name] = round(p95(values) * 1000, 1)
        result["median_ms"][name] = round(statistics.median(values) * 1000, 1)
        if name != "python -c pass":
            result["ratio_p95"][name] = round(p95(values) / base, 2)
    # The target is the hook's without a model (README, "Figures"); with one it is measured, not held to it.
    result["target_met"] = all(r <= 2.5 for name, r in result["ratio_p95"].items() if ", model" not in name)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"hook on {args.lessons} lessons, {args.episodes} episodes"
              + (f", model {args.embed_model} at {args.embed_url}" if args.embed_url else "")
              + f"; {args.runs} runs each "
              f"(first call, judging the received lessons: {result['first_call_ms']} ms)")
        for name in times:
            ratio = result["ratio_p95"].get(name)
            print(f"  {name:<28} median {result['median_ms'][name]:7.1f} ms   p95 {result['p95_ms'][name]:7.1f} ms"
                  + (f"   {ratio:.2f} × python -c pass  (answered {answered[name]}/{args.runs})" if ratio else ""))
        print(f"  target p95 ≤ 2.5 × python -c pass: {'met' if result['target_met'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
