"""Benchmark: the public corpus replayed in the hashed space and in a model's, and the hook's rules for each moment.

Issue 23 asks ``neverestctl replay`` to choose how lessons are matched at each moment, the model's space
included when a model is configured.  This runs ``replay`` (neverest/agents/replay.py) on
tests/data/sessions in:

- ``hashed``: no model (the default memory);
- ``model, hook hashed``: the memory in the model's space (sleep, repeats, baseline), the hook matching prompts
  in the hashed space, as it did before it could ask the model;
- ``model``: the hook's rules as shipped (hook.MODEL_MIN_SHARED_TERMS, hook.MODEL_MIN_COSINE);
- ``prompt T/C``: a prompt matches a lesson when it shares T key terms and reaches cosine C in the model's
  space (the hook's constants set for the run);
- ``call +C`` / ``call only C``: before a shell call, the lessons whose cosine with the call reaches C in the
  model's space are given besides (or instead of) those whose moment the call is by moments.py.

and, in both spaces, recall's ranking of "fastapi module not found" (tests/test_recall.py's two episodes).
Needs a model served on 127.0.0.1 (benchmarks/embed_server.py, best with ``--cache 200000``: the runs send
the same texts again):

    python benchmarks/replay_spaces.py --embed-url http://127.0.0.1:8765/v1 --embed-model all-minilm-l6-v2 \\
        [--only hashed,model,...] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from neverest.agents import hook
from neverest.agents.hook_model import ModelQuery
from neverest.agents.replay import ReplayReport, replay
from neverest.config import Config
from neverest.memory.embed import Embedder, HashedEmbedder, ModelEmbedder
from neverest.memory.events import ingest
from neverest.memory.model import Endpoint
from neverest.memory.queries import injections as q
from neverest.memory.recall import recall
from neverest.memory.store import open_store

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "sessions"
NOW = datetime(2026, 4, 1, tzinfo=UTC)


@contextmanager
def constants(**values: Any) -> Iterator[None]:
    """The hook's constants set for one run, and put back."""
    before = {name: getattr(hook, name) for name in values}
    for name, value in values.items():
        setattr(hook, name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            setattr(hook, name, value)


@contextmanager
def calls_by_meaning(cosine: float, keep_moments: bool) -> Iterator[None]:
    """Before a shell call, the lessons at ``cosine`` or above with the call in the model's space, besides (or
    instead of) the ones moments.py finds."""
    original = hook.rank

    def rank(event: str, rows: list[q.Candidate], payload: dict[str, Any], notes: hook.Notes = None, *,
             model: ModelQuery | None = None, deadline: float = math.inf) -> list[list[q.Candidate]]:
        chosen = original(event, rows, payload, notes, model=model, deadline=deadline)
        if event != "PreToolUse" or model is None or not hook._command(payload):
            return chosen
        vector = model.vector(hook.tool_query(payload))
        if vector is None:
            return chosen
        scored = []
        for group in hook._group(rows):
            row = group[0]
            if row.space == model.space and row.embedding:
                found = sum(a * b for a, b in zip(vector, hook.dense(row.embedding), strict=True))
                if found >= cosine:
                    scored.append((found, group))
        near = [g for _, g in sorted(scored, key=lambda item: -item[0])]
        if not keep_moments:
            return near
        hashes = {g[0].hash for g in chosen}
        return chosen + [g for g in near if g[0].hash not in hashes]

    hook.rank = rank
    try:
        yield
    finally:
        hook.rank = original


def figures(report: ReplayReport, took_s: float) -> dict[str, Any]:
    by_event: Counter[str] = Counter()
    unused_by_event: Counter[str] = Counter()
    for d in report.details:
        if "given" in d:
            event = d["given"].split(":", 1)[0]
            by_event[event] += 1
            unused_by_event[event] += d["used"] != "yes"
    return {"space": report.space, "sessions": report.sessions, "lessons": report.lessons, "repeats": report.repeats,
            "caught": report.memory.caught, "missed": report.memory.missed,
            "injections": report.memory.injections, "unused": report.memory.unused,
            "by_event": {e: f"{n} ({unused_by_event[e]} unused)" for e, n in sorted(by_event.items())},
            "baseline": report.baseline.to_json(), "seconds": round(took_s, 1), "learned": report.learned}


def run(config: Config, *, hook_model: bool = True) -> dict[str, Any]:
    started = time.monotonic()
    report = replay(CORPUS / "claude" / "projects", CORPUS / "codex" / "sessions", config=config,
                    hook_model=hook_model)
    return figures(report, time.monotonic() - started)


def recall_check(embedder: Embedder) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp))
        ingest(store, [{"kind": "error", "title": "Bash: cargo", "happened": "cargo: error: linker cc not found",
                        "session": "a"},
                       {"kind": "error", "title": "Bash: pytest",
                        "happened": "ModuleNotFoundError: No module named 'fastapi'", "session": "b"}], now=NOW)
        hits = recall(store, "fastapi module not found", now=NOW, embedder=embedder, touch=False)
        store.close()
    return {"space": embedder.space,
            "ranked": [{"text": h.text[:60], "score": h.score, "cosine": h.cosine} for h in hits],
            "right": bool(hits) and "fastapi" in hits[0].text}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--embed-url", required=True)
    parser.add_argument("--embed-model", required=True)
    parser.add_argument("--only", default="", help="comma-separated run names (default: all)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    model = Config(embed_url=args.embed_url, embed_model=args.embed_model)
    runs: dict[str, Callable[[], dict[str, Any]]] = {
        "hashed": lambda: run(Config()),
        "model, hook hashed": lambda: run(model, hook_model=False),
        "model": lambda: run(model),
    }
    for terms, cosine in ((1, 0.3), (1, 0.4), (1, 0.5), (0, 0.4), (0, 0.5), (0, 0.6)):
        def prompt(terms: int = terms, cosine: float = cosine) -> dict[str, Any]:
            with constants(MODEL_MIN_SHARED_TERMS=terms, MODEL_MIN_COSINE=cosine):
                return run(model)
        runs[f"prompt {terms}/{cosine}"] = prompt
    for cosine, keep in ((0.5, True), (0.6, True), (0.5, False)):
        def call(cosine: float = cosine, keep: bool = keep) -> dict[str, Any]:
            with calls_by_meaning(cosine, keep):
                return run(model)
        runs[f"call {'+' if keep else 'only '}{cosine}"] = call
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    results: dict[str, Any] = {}
    for name, go in runs.items():
        if only and name not in only:
            continue
        results[name] = go()
        if not args.json:
            r = results[name]
            b = r["baseline"]
            print(f"{name:<20} {r['space']:<24} lessons {r['lessons']:>2}  repeats {r['repeats']:>2}  caught "
                  f"{r['caught']:>2}  missed {r['missed']:>2}  injections {r['injections']:>3}  unused {r['unused']:>3}"
                  f"  | baseline caught {b['caught']:>2} injections {b['injections']:>5} unused {b['unused']:>5}"
                  f"  ({r['seconds']} s)  {r['by_event']}", flush=True)
            if name in ("hashed", "model"):
                print("".join(f"    learned {text}\n" for text in r["learned"]), end="", flush=True)
    endpoint = Endpoint(args.embed_url, args.embed_model)
    with ModelEmbedder(endpoint) as embedder:
        checks = [recall_check(HashedEmbedder()), recall_check(embedder)]
    if args.json:
        print(json.dumps({"runs": results, "recall": checks}))
    else:
        for check in checks:
            print(f"recall 'fastapi module not found' in {check['space']}: "
                  + ("right" if check["right"] else "WRONG") + " " + json.dumps(check["ranked"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
