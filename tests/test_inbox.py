"""The inbox: nothing lost, nothing read twice, with concurrent writers, rotation and kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from neverest.memory.events import IngestResult
from neverest.memory.inbox import InboxWatch, drain_inbox
from neverest.memory.store import Store, open_store
from neverest.paths import INBOX_FILE

NOW = datetime(2026, 11, 21, 3, 0, tzinfo=UTC)
REPO = Path(__file__).resolve().parent.parent

# An agent following the writer protocol: open by path, one write() per whole line, close.
WRITER = """
import json, os, random, sys, time
path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(name)
for i in range(count):
    event = {"kind": "note", "text": f"{name} {i}", "agent": name, "pad": "p" * rng.randrange(6000)}
    line = json.dumps(event).encode() + b"\\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        assert os.write(fd, line) == len(line)
    finally:
        os.close(fd)
    if i % 10 == 0:
        time.sleep(0.005)
"""

DRAINER = """
import sys
from datetime import UTC, datetime
from pathlib import Path
from neverest.memory.inbox import InboxWatch, drain_inbox
from neverest.memory.store import open_store
home = Path(sys.argv[1])
store = open_store(home)
print("ready", flush=True)
drain_inbox(store, home, now=datetime(2026, 11, 21, 3, 0, tzinfo=UTC), rotate_bytes=int(sys.argv[2]), quiet_s=0.0)
print("done", flush=True)
"""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path) as s:
        yield s


def append(home: Path, data: bytes) -> None:
    fd = os.open(home / INBOX_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def note(text: str) -> bytes:
    return json.dumps({"kind": "note", "text": text, "agent": "t"}).encode() + b"\n"


def texts(store: Store) -> list[str]:
    return [row[0] for row in store.db.execute("SELECT text FROM episodes ORDER BY rowid")]


def leftovers(home: Path) -> list[str]:
    return sorted(p.name for p in home.glob(f"{INBOX_FILE}.*.draining"))


def python_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def test_drain_ingests_once_and_a_second_drain_reads_nothing(tmp_path: Path, store: Store) -> None:
    append(tmp_path, note("one") + b"{oops\n" + note("two") + b"\n" + note("one"))
    result = drain_inbox(store, tmp_path, now=NOW)
    assert (result.stored, result.duplicates) == (2, 1)
    [(position, reason)] = result.refused
    assert position == 2 and reason.startswith("inbox.jsonl line 2: not JSON")
    assert drain_inbox(store, tmp_path, now=NOW) == IngestResult()
    append(tmp_path, note("three"))
    result = drain_inbox(store, tmp_path, now=NOW)
    assert (result.stored, result.duplicates, result.refused) == (1, 0, [])
    assert texts(store) == ["one", "two", "three"]


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_the_watch_skips_a_poll_only_while_a_complete_drain_left_nothing(tmp_path: Path, store: Store) -> None:
    watch = InboxWatch(tmp_path, quiet_s=2.0)
    assert not watch.due() and not watch.due()  # no inbox: nothing a drain could read, even before any drain
    (tmp_path / INBOX_FILE).touch()
    assert watch.due()  # nothing known yet
    drain_inbox(store, tmp_path, now=NOW)
    watch.drained()
    (tmp_path / INBOX_FILE).unlink()
    assert not watch.due()  # gone: nothing to drain
    append(tmp_path, note("one"))
    assert watch.due()  # a new file
    drain_inbox(store, tmp_path, now=NOW)
    watch.drained()
    assert watch.due()  # it was younger than quiet_s when the drain began: drained again
    _age(tmp_path / INBOX_FILE, 5.0)
    assert watch.due()  # the times moved
    drain_inbox(store, tmp_path, now=NOW)
    watch.drained()
    assert not watch.due() and not watch.due()
    append(tmp_path, note("two"))
    _age(tmp_path / INBOX_FILE, 5.0)
    assert watch.due()  # it grew
    assert drain_inbox(store, tmp_path, now=NOW).stored == 1
    # a drain that did not complete (a busy store) is not one: the next poll drains
    assert watch.due()
    assert watch.due()
    watch.drained()
    assert not watch.due()
    assert texts(store) == ["one", "two"]


def test_the_watch_keeps_draining_a_line_without_newline_until_it_is_read(tmp_path: Path, store: Store) -> None:
    watch = InboxWatch(tmp_path, quiet_s=2.0)
    append(tmp_path, note("forgot the newline").rstrip(b"\n"))
    for _ in range(3):  # fresh: the drainer waits for the rest, the watch keeps asking
        assert watch.due()
        assert drain_inbox(store, tmp_path, now=NOW, quiet_s=2.0).stored == 0
        watch.drained()
    _age(tmp_path / INBOX_FILE, 3.0)
    assert watch.due()
    assert drain_inbox(store, tmp_path, now=NOW, quiet_s=2.0).stored == 1
    watch.drained()
    assert not watch.due()


def test_the_watch_never_skips_while_a_draining_file_remains(tmp_path: Path, store: Store) -> None:
    watch = InboxWatch(tmp_path, quiet_s=0.0)
    append(tmp_path, note("a") * 50)
    drain_inbox(store, tmp_path, now=NOW, rotate_bytes=10, quiet_s=60)  # rotated; the renamed file is not quiet
    assert leftovers(tmp_path)
    for _ in range(2):
        assert watch.due()
        drain_inbox(store, tmp_path, now=NOW, rotate_bytes=10, quiet_s=60)
        watch.drained()
    assert watch.due()
    drain_inbox(store, tmp_path, now=NOW, rotate_bytes=10, quiet_s=0)  # now deleted
    watch.drained()
    assert not leftovers(tmp_path)
    assert not watch.due()  # the listing changed, to nothing a drain could read


def test_missing_inbox_is_nothing_to_do(tmp_path: Path, store: Store) -> None:
    assert drain_inbox(store, tmp_path, now=NOW) == IngestResult()


def test_a_partial_last_line_waits_for_its_newline(tmp_path: Path, store: Store) -> None:
    whole = note("complete later")
    append(tmp_path, note("first") + whole[:10])
    assert drain_inbox(store, tmp_path, now=NOW, quiet_s=60).stored == 1
    assert drain_inbox(store, tmp_path, now=NOW, quiet_s=60) == IngestResult()
    append(tmp_path, whole[10:])
    result = drain_inbox(store, tmp_path, now=NOW, quiet_s=60)
    assert (result.stored, result.refused) == (1, [])
    assert texts(store) == ["first", "complete later"]


def test_a_quiet_line_without_newline_is_read_and_the_next_line_stays_whole(tmp_path: Path, store: Store) -> None:
    append(tmp_path, note("forgot the newline").rstrip(b"\n"))
    assert drain_inbox(store, tmp_path, now=NOW, quiet_s=0).stored == 1
    append(tmp_path, note("next"))
    result = drain_inbox(store, tmp_path, now=NOW, quiet_s=0)
    assert (result.stored, result.refused) == (1, [])
    assert texts(store) == ["forgot the newline", "next"]


def test_a_replaced_or_rewritten_inbox_is_read_from_its_start(tmp_path: Path, store: Store) -> None:
    inbox = tmp_path / INBOX_FILE
    append(tmp_path, note("a") + note("b"))
    drain_inbox(store, tmp_path, now=NOW)
    # Replaced by another file (another inode) that is already longer than the cursor.
    replacement = tmp_path / "new.jsonl"
    replacement.write_bytes(note("c") + note("d") + note("e"))
    os.replace(replacement, inbox)
    assert drain_inbox(store, tmp_path, now=NOW).stored == 3
    # Rewritten in place (same inode, longer, different first bytes).
    inbox.write_bytes(note("f") + note("g") + note("h") + note("i"))
    assert drain_inbox(store, tmp_path, now=NOW).stored == 4
    # Truncated in place.
    inbox.write_bytes(note("j"))
    assert drain_inbox(store, tmp_path, now=NOW).stored == 1
    assert texts(store) == list("abcdefghij")


def test_rotation_keeps_every_line_and_deletes_the_quiet_renamed_file(tmp_path: Path, store: Store) -> None:
    inbox = tmp_path / INBOX_FILE
    append(tmp_path, b"".join(note(f"old {i}") for i in range(50)))
    # A writer that opened the inbox before the rotation and writes after it.
    late = os.open(inbox, os.O_WRONLY | os.O_APPEND)
    try:
        result = drain_inbox(store, tmp_path, now=NOW, rotate_bytes=1000, quiet_s=60)
        assert result.stored == 50
        assert not inbox.exists()
        [renamed] = leftovers(tmp_path)
        os.write(late, note("late"))
    finally:
        os.close(late)
    append(tmp_path, note("new"))
    result = drain_inbox(store, tmp_path, now=NOW, rotate_bytes=1000, quiet_s=60)
    assert (result.stored, result.duplicates, result.refused) == (2, 0, [])
    assert leftovers(tmp_path) == [renamed]  # not quiet yet
    assert drain_inbox(store, tmp_path, now=NOW, rotate_bytes=1000, quiet_s=0) == IngestResult()
    assert leftovers(tmp_path) == []
    assert sorted(texts(store)) == sorted([f"old {i}" for i in range(50)] + ["late", "new"])


def test_a_crash_between_rename_and_commit_is_recovered(tmp_path: Path, store: Store) -> None:
    inbox = tmp_path / INBOX_FILE
    append(tmp_path, note("before"))
    drain_inbox(store, tmp_path, now=NOW)
    append(tmp_path, note("after"))
    # What a drainer killed right after its rename leaves: the file renamed, the store unaware.
    os.rename(inbox, tmp_path / f"{INBOX_FILE}.{inbox.stat().st_ino}.draining")
    append(tmp_path, note("fresh"))
    result = drain_inbox(store, tmp_path, now=NOW, quiet_s=0)
    assert (result.stored, result.duplicates, result.refused) == (2, 0, [])
    assert texts(store) == ["before", "after", "fresh"]
    assert leftovers(tmp_path) == []


def test_concurrent_appenders_lose_nothing_and_store_nothing_twice(tmp_path: Path, store: Store) -> None:
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / INBOX_FILE), f"w{n}", "300"],
                         env=python_env())
        for n in range(3)
    ]
    results: list[IngestResult] = []
    while any(w.poll() is None for w in writers):
        results.append(drain_inbox(store, tmp_path, now=NOW, rotate_bytes=64 * 1024, quiet_s=1.0))
    assert [w.wait() for w in writers] == [0, 0, 0]
    results.append(drain_inbox(store, tmp_path, now=NOW, rotate_bytes=64 * 1024, quiet_s=1.0))
    assert sum(r.duplicates for r in results) == 0
    assert [r.refused for r in results if r.refused] == []
    stored = texts(store)
    assert len(stored) == 900
    assert set(stored) == {f"w{n} {i}" for n in range(3) for i in range(300)}
    assert sum(r.stored for r in results) == 900
    # A renamed file is deleted once nobody has written to it for quiet_s, by its mtime (the kernel's
    # clock): age what is left by as much rather than wait.  The inbox too: when the writers finish within
    # quiet_s of each other, the drain that deletes the renamed file then renames the inbox (a rename keeps
    # its mtime), and that one must be quiet as well to go in the same drain.
    for name in [*leftovers(tmp_path), *([INBOX_FILE] if (tmp_path / INBOX_FILE).exists() else [])]:
        past = time.time() - 2.0  # twice quiet_s
        os.utime(tmp_path / name, (past, past))
    drain_inbox(store, tmp_path, now=NOW, rotate_bytes=64 * 1024, quiet_s=1.0)
    assert leftovers(tmp_path) == []


def test_a_drainer_killed_at_any_moment_loses_nothing(tmp_path: Path) -> None:
    batch, total = 1500, 0
    # Killed before its first commit, in the middle, and (None) left to finish, which
    # rotates the inbox and deletes the renamed file, so later kills meet a fresh inbox.
    for delay in (0.0, 0.01, 0.03, 0.06, 0.1, None, 0.02, 0.15, 0.25, 0.04, 0.4, 0.08):
        append(tmp_path, b"".join(note(f"e{total + i}") for i in range(batch)))
        total += batch
        drainer = subprocess.Popen([sys.executable, "-c", DRAINER, str(tmp_path), str(32 * 1024)],
                                   stdout=subprocess.PIPE, env=python_env())
        assert drainer.stdout is not None
        assert drainer.stdout.readline() == b"ready\n"
        if delay is None:
            assert drainer.stdout.readline() == b"done\n"
            assert not (tmp_path / INBOX_FILE).exists() and leftovers(tmp_path) == []
        else:
            time.sleep(delay)
            drainer.send_signal(signal.SIGKILL)
        drainer.wait()
        drainer.stdout.close()
    with open_store(tmp_path) as store:
        result = drain_inbox(store, tmp_path, now=NOW, rotate_bytes=32 * 1024, quiet_s=0)
        assert (result.duplicates, result.refused) == (0, [])
        stored = texts(store)
    assert len(stored) == total
    assert set(stored) == {f"e{i}" for i in range(total)}
