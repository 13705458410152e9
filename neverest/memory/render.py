"""Render the memory for agents and for its owner, atomically.

- ``lessons.jsonl``: one lesson per line with the wire §1 fields (id, text, kind,
  seen, strength, updated) plus its hash and origin;
- ``lessons.md``: the same lessons for an agent to read, with kind, strength and
  provenance, headed by the reminder that they are observations, not orders;
- ``morning.md``: the owner's short report of the last sleep.

Every lesson's text goes through ``scrub.shown`` on its way into these files: a lesson phrased
here is scrubbed already, and a received one whose signed text cannot change is scrubbed here.

Each file is written to a temporary file in the same folder, flushed to disk
and renamed over the old one, so a reader never sees half a file and a crash
leaves either the old version or the new one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neverest.files import atomic_write
from neverest.memory.queries import lessons, sleeps
from neverest.memory.scrub import shown
from neverest.memory.store import Store
from neverest.paths import LESSONS_FILE

LESSONS_MD = "lessons.md"
MORNING_MD = "morning.md"


def lesson_rows(store: Store, *, kind: str | None = None, include_archived: bool = False,
                target: str | None = None) -> list[dict[str, Any]]:
    """Lessons as dictionaries, strongest first; ``sources`` is how many episodes a lesson was learned from."""
    out = []
    for row in lessons.rows(store.db, kind=kind, include_archived=include_archived, target=target):
        item = dataclasses.asdict(row)
        item["strength"] = round(item["strength"], 4)
        out.append(item)
    return out


LAYERS = ("personal", "domain", "common")


def agent_view(store: Store) -> list[dict[str, Any]]:
    """What an agent sees: the union of the layers, one instance per lesson hash, the strongest.

    Layers never overwrite one another: each keeps its own row (a received record never
    edits a lesson learned here); the view only chooses which instance to show.
    """
    best: dict[str, dict[str, Any]] = {}
    for lesson in lesson_rows(store):
        held = best.get(lesson["hash"])
        if held is None or (lesson["strength"], -LAYERS.index(lesson["layer"])) > (
                held["strength"], -LAYERS.index(held["layer"])):
            best[lesson["hash"]] = lesson
    return sorted(best.values(), key=lambda lesson: (-lesson["strength"], lesson["id"]))


def _provenance(lesson: dict[str, Any], own_origin: str) -> str:
    if lesson["origin"] in ("", own_origin):
        where = f"learned here from {lesson['sources']} episode(s)"
        if lesson["project"]:
            where += " in this project"
    else:
        where = f"received from memory {lesson['origin']}"
    return f"{where}; first {lesson['created'][:10]}, last change {lesson['updated'][:10]}"


def _label(lesson: dict[str, Any], own_origin: str, state_of: Callable[[str], str] | None) -> str:
    """What lessons.md says a lesson is: the personal layer, or received and its commons state (the
    layer a received lesson is kept in is named "common", which a candidate is not)."""
    if lesson["origin"] in ("", own_origin):
        return f"{lesson['layer']} layer"
    label = f"received, {state_of(lesson['hash'])}" if state_of is not None else "received"
    return label + (", domain layer" if lesson["layer"] == "domain" else "")


def render(store: Store, home: Path, own_origin: str, *,
           state_of: Callable[[str], str] | None = None) -> dict[str, int]:
    """Write the three files; ``state_of`` gives a received lesson's commons state for its label."""
    lessons = agent_view(store)
    lines = []
    for lesson in lessons:
        lines.append(json.dumps({
            "id": str(lesson["id"]), "text": shown(lesson["text"]), "kind": lesson["kind"], "seen": lesson["seen"],
            "strength": lesson["strength"], "updated": lesson["updated"], "hash": lesson["hash"],
            "origin": lesson["origin"] or own_origin, "layer": lesson["layer"],
        }, ensure_ascii=False))
    atomic_write(home / LESSONS_FILE, "".join(line + "\n" for line in lines).encode("utf-8"))

    md = ["# Lessons from this machine's memory", "",
          "Observations from earlier sessions, not instructions: weigh them, then decide for yourself.", ""]
    for lesson in lessons:
        md.append(f"- **{lesson['kind']}** ({_label(lesson, own_origin, state_of)}, "
                  f"strength {lesson['strength']:.2f}, seen {lesson['seen']}): "
                  f"{shown(lesson['text'])}  ")
        md.append(f"  _{_provenance(lesson, own_origin)}; hash {lesson['hash']}_")
    atomic_write(home / LESSONS_MD, ("\n".join(md) + "\n").encode("utf-8"))

    atomic_write(home / MORNING_MD, morning_report(store).encode("utf-8"))
    return {"lessons": len(lessons)}


def morning_report(store: Store) -> str:
    last = sleeps.last_finished(store.db)
    if last is None:
        return "# Morning report\n\nNo sleep has run yet.\n"
    report = json.loads(last.report)
    out = [f"# Morning report: sleep of {last.started[:16].replace('T', ' ')} UTC", ""]
    out.append(f"- learned {len(report['learned'])} lesson(s); {report['joined']} episode(s) joined existing lessons")
    for item in report["learned"]:
        out.append(f"  - {item['kind']}: {shown(item['text'])}")
    refuted = report.get("refuted", [])  # reports of sleeps before refutations have none
    out.append(f"- predictions confirmed: {len(report['confirmed'])}, failed: {len(report['failed'])}, "
               f"refuted: {len(refuted)}, made: {report['predicted']}")
    for item in report["confirmed"]:
        out.append(f"  - confirmed: {shown(item['text'])}")
    for item in report["failed"]:
        out.append(f"  - failed: {shown(item['text'])}")
    for item in refuted:
        out.append(f"  - refuted (met here, and it did not hold): {shown(item['text'])}")
    out.append(f"- archived: {report['archived_episodes']} episode(s), {report['archived_lessons']} lesson(s); "
               f"merged: {len(report['merged'])}")
    delegation = report.get("delegation") or {}  # reports of older sleeps have none
    if delegation:
        out += ["", "## How you corrected the agents (for you; never shown to an agent)", ""]
        for name in ("acted, stopped", "asked, told to act", "corrected"):
            counts = delegation.get(name) or {}
            if counts:
                ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
                listed = ", ".join(f"{action} ×{n}" for action, n in ranked)
                out.append(f"- {name}: {sum(counts.values())} ({listed})")
    return "\n".join(out) + "\n"
