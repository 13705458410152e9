"""Render the memory for agents and for its owner, atomically.

- ``lessons.jsonl``: one lesson per line with the wire §1 fields (id, text, kind,
  seen, strength, updated) plus its hash, origin and layer;
- ``lessons.md``: the same lessons for an agent to read, with kind, state, strength and
  provenance (``views``), headed by the one framing: observations, not instructions;
- ``morning.md``: the owner's short report of the last sleep.

Every lesson's text goes through ``scrub.shown`` on its way into these files: a lesson phrased
here is scrubbed already, and a received one whose signed text cannot change is scrubbed here.

Each file is written to a temporary file in the same folder, flushed to disk
and renamed over the old one, so a reader never sees half a file and a crash
leaves either the old version or the new one.
"""

from __future__ import annotations

import json
from pathlib import Path

from neverest.files import atomic_write
from neverest.memory.queries import sleeps
from neverest.memory.scrub import shown
from neverest.memory.store import Store
from neverest.memory.views import LessonView, framing, strongest
from neverest.paths import LESSONS_FILE

LESSONS_MD = "lessons.md"
MORNING_MD = "morning.md"


def _label(lesson: LessonView) -> str:
    """What lessons.md says a lesson is: its state, and whether it was received (the layer a received
    lesson is kept in is named "common", which a candidate is not: only the domain layer is named)."""
    if lesson.own:
        return f"{lesson.state}, {lesson.layer} layer"
    return f"received, {lesson.state}" + (", domain layer" if lesson.layer == "domain" else "")


def render(store: Store, home: Path, lessons: list[LessonView]) -> dict[str, int]:
    """Write the three files from the ``lessons`` held (``Memory.lessons``) and the store's last sleep."""
    chosen = strongest(lessons)
    lines = []
    for lesson in chosen:
        lines.append(json.dumps({
            "id": str(lesson.id), "text": lesson.shown, "kind": lesson.kind, "seen": lesson.seen,
            "strength": lesson.strength, "updated": lesson.updated, "hash": lesson.hash,
            "origin": lesson.origin, "layer": lesson.layer,
        }, ensure_ascii=False))
    atomic_write(home / LESSONS_FILE, "".join(line + "\n" for line in lines).encode("utf-8"))

    framed = framing()
    md = ["# Lessons from this machine's memory", "", framed[0].upper() + framed[1:] + ".", ""]
    for lesson in chosen:
        md.append(f"- **{lesson.kind}** ({_label(lesson)}, strength {lesson.strength:.2f}, "
                  f"seen {lesson.seen}): {lesson.shown}  ")
        md.append(f"  _{lesson.provenance}; hash {lesson.hash}_")
    atomic_write(home / LESSONS_MD, ("\n".join(md) + "\n").encode("utf-8"))

    atomic_write(home / MORNING_MD, morning_report(store).encode("utf-8"))
    return {"lessons": len(chosen)}


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
