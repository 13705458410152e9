"""Receiving through the verifying processes: the same results as verifying in the receiver,
refusals that cross the process boundary, answers checked, workers replaced, a light CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nacl.signing
import numpy as np
import pytest

from neverest import records, verify_pool
from neverest.clock import iso
from neverest.config import Config
from neverest.memory import holdings
from neverest.memory.receive import Receiver, _verdicts
from neverest.memory.store import open_store
from neverest.records import MAX_RECORD_BYTES, RecordError, lesson_hash, sign_confirm, sign_lesson, sign_revoke
from neverest.verify_pool import VerifierError, VerifyPool

NOW = datetime(2026, 4, 1, 12, tzinfo=UTC)
OWN = "f" * 16
KEYS = [nacl.signing.SigningKey(bytes([i]) * 32) for i in range(1, 9)]
TEXTS = ["pytest hangs when the database container is down",
         "pytest hangs when the database container is down again",  # the same meaning: corroborates
         "the linter crashes on files with a BOM",
         "npm ci fails behind the proxy without a CA bundle"]


@pytest.fixture(scope="module")
def pool() -> Iterator[VerifyPool]:
    pool = VerifyPool(1)
    yield pool
    pool.close()


def mixed() -> list[bytes | None]:
    """Every path of the merge rule and of refusal, in an order where order matters."""
    out: list[bytes | None] = []
    first = lesson_hash("error", TEXTS[0])
    out.append(sign_confirm(KEYS[5], first, at=iso(NOW), seq=1).raw)  # a confirmation before its lesson
    for k, key in enumerate(KEYS[:4]):
        for s, text in enumerate(TEXTS):
            out.append(sign_lesson(key, kind="error", text=text, seen=1 + s, strength=1.0, updated=iso(NOW),
                                   seq=s + 1).raw)
        out.append(sign_confirm(key, lesson_hash("error", TEXTS[(k + 2) % 4]), at=iso(NOW), seq=5).raw)
    out.append(sign_revoke(KEYS[0], lesson_hash("error", TEXTS[2]), at=iso(NOW), seq=6).raw)  # after its lesson
    newer = sign_lesson(KEYS[1], kind="error", text=TEXTS[3], seen=9, strength=1.0,
                        updated=iso(NOW + timedelta(minutes=1)), seq=7).raw
    out.append(newer)
    fork = sign_lesson(KEYS[2], kind="surprise", text="the cache hides the error", seen=1, strength=1.0,
                       updated=iso(NOW), seq=1).raw  # seq 1 of KEYS[2] again: a fork
    out.append(fork)
    out.append(out[3])  # the same bytes again: a duplicate
    out.append(sign_lesson(KEYS[6], kind="error", text="the clock runs ahead", seen=1, strength=1.0,
                           updated=iso(NOW + timedelta(days=2)), seq=1).raw)  # future
    bad_sig = bytearray(sign_lesson(KEYS[7], kind="error", text="tests fail at midnight", seen=1, strength=1.0,
                                    updated=iso(NOW), seq=1).raw)
    at = bad_sig.index(b'"sig":"') + 8
    bad_sig[at] = ord("0") if bad_sig[at] != ord("0") else ord("1")
    out += [bytes(bad_sig), b"{not json", None, b'{"v":1,"v":1}',
            sign_lesson(KEYS[7], kind="error", text="tests fail at midnight", seen=1, strength=1.0,
                        updated=iso(NOW), seq=2).raw]
    return out


def outcome(home: Path, pool: VerifyPool | None, lines: list[bytes | None], per_call: int) -> dict[str, Any]:
    store = open_store(home)
    try:
        results = []
        with Receiver(store, own_origin=OWN, config=Config(), now=NOW, pool=pool, pool_min_lines=1) as receiver:
            for start in range(0, len(lines), per_call):
                results.append(receiver.receive(lines[start:start + per_call], source=f"s{start % 3}"))
        db = store.db
        return {
            "results": [r.to_json() for r in results],
            "records": db.execute("SELECT origin, seq, type, target, raw, source, superseded FROM records "
                                  "ORDER BY id").fetchall(),
            "forks": db.execute("SELECT origin, seq, other_raw FROM forks ORDER BY origin, seq").fetchall(),
            "lessons": db.execute("SELECT id, hash, kind, text, strength, seen, origin, layer, archived, space, "
                                  "embedding FROM lessons ORDER BY id").fetchall(),
            "origins": db.execute("SELECT * FROM lesson_origins ORDER BY lesson_id, origin").fetchall(),
            "refusals": [(r.source, r.reason, r.count) for r in holdings.refusals(db)],
        }
    finally:
        store.close()


@pytest.mark.parametrize("per_call", [1, 5, 300])
def test_receiving_through_a_verifying_process_changes_nothing_in_the_results(
        tmp_path: Path, pool: VerifyPool, per_call: int) -> None:
    lines = mixed()
    here = outcome(tmp_path / "here", None, lines, per_call)
    there = outcome(tmp_path / "there", pool, lines, per_call)
    assert pool.started
    assert there == here
    total = {k: sum(r[k] for r in here["results"]) for k in ("accepted", "duplicates", "forks", "candidates",
                                                               "corroborated", "confirmed", "revoked")}
    # The case is worth comparing: every path of the merge rule was taken.
    assert total["candidates"] >= 2 and total["corroborated"] >= 1 and total["confirmed"] >= 1
    assert total["revoked"] == 1 and total["forks"] == 1 and total["duplicates"] >= 1
    reasons = {reason for _, reason, _ in here["refusals"]}
    assert {"bad-signature", "not-json", "too-large", "duplicate-key", "future", "fork"} <= reasons


def test_the_pool_parses_as_the_receiver_would(pool: VerifyPool) -> None:
    lines = mixed() * 3  # over one batch of the pool: several requests, answered in order
    tagged = list(enumerate(lines))
    here = [(tag, item.code if isinstance(item, RecordError) else item.raw) for tag, item in records.parse_many(tagged)]
    there = [(tag, item.code if isinstance(item, RecordError) else item.raw)
             for tag, item in verify_pool.parse_many(pool, tagged, min_lines=1)]
    assert there == here


def test_an_answer_that_is_not_a_batch_s_verdicts_is_our_fault_not_the_peer_s() -> None:
    line = sign_lesson(KEYS[0], kind="error", text=TEXTS[0], seen=1, strength=1.0, updated=iso(NOW), seq=1).raw
    vector = np.zeros(256, "<f4").tobytes()
    assert [type(r) for r, _ in _verdicts([line], [[None], vector])] == [records.Record]
    for reply in ([[None], b""],  # a lesson without its vector
                  [[None], vector * 2],  # a vector too many
                  [[None, None], vector],  # verdicts for lines not sent
                  [[["no-such-reason", "x"]], b""],
                  [[None]], "garbage", None):
        with pytest.raises(VerifierError):
            list(_verdicts([line], reply))
    with pytest.raises(VerifierError):  # "valid" for a line the receiver could not even hold
        list(_verdicts([None], [[None], b""]))


def test_a_verifying_process_killed_is_replaced_at_the_next_batch(tmp_path: Path) -> None:
    pool = VerifyPool(1)
    try:
        lines = mixed()
        first = outcome(tmp_path / "a", pool, lines, 300)
        [pid] = pool.pids()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        # Reaped (not merely a zombie) means its reader saw the end of its pipe and marked it dead.
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        again = outcome(tmp_path / "b", pool, lines, 300)
        assert pool.pids() != [pid] and again == first
    finally:
        pool.close()


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name: [0] state, [2] process group, [3] session, [16] nice."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_workers_run_nicer_in_a_group_of_their_own_in_the_parent_s_session() -> None:
    """Nicer, so that the parent (which stores what they verify) and the owner's other work come first; in
    the parent's session, because Linux shares the CPU between sessions before niceness counts; in a
    group of their own, so that Ctrl-C in the parent's terminal (sent to its group) does not reach them."""
    pool = VerifyPool(1)
    try:
        assert pool.submit("verify-lines", [mixed()[0]]).result() == [None]
        [pid] = pool.pids()
        worker, parent = _stat(pid), _stat(os.getpid())
        assert int(worker[16]) == min(19, int(parent[16]) + verify_pool.WORKER_NICE)
        assert worker[3] == parent[3], "the worker left the parent's session"
        assert worker[2] == str(pid) and worker[2] != parent[2], "the worker is in the parent's process group"
    finally:
        pool.close()


def test_nothing_is_stored_unverified_when_the_pool_fails(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    pool = VerifyPool(1)
    pool.close()  # every request now fails on our side
    lines = [sign_lesson(KEYS[0], kind="error", text=f"{TEXTS[2]} case {i}", seen=1, strength=1.0,
                         updated=iso(NOW), seq=i + 1).raw for i in range(40)]
    try:
        with pytest.raises(VerifierError), Receiver(store, own_origin=OWN, config=Config(), now=NOW, pool=pool,
                                                   pool_min_lines=1) as receiver:
            receiver.receive(lines, source="peer")
        assert holdings.count(store.db) == 0 and holdings.refusals(store.db) == []
    finally:
        store.close()


def test_neverestctl_verify_runs_without_the_other_commands(tmp_path: Path) -> None:
    path = tmp_path / "lines.jsonl"
    lines = [sign_lesson(KEYS[0], kind="error", text=f"{TEXTS[2]} case {i}", seen=1, strength=1.0,
                         updated=iso(NOW), seq=i + 1).raw for i in range(100)]
    path.write_bytes(b"\n".join(lines) + b"\n" + b"x" * (MAX_RECORD_BYTES + 1) + b"\n")
    code = ("import sys\nfrom neverest.ctl import main\nstatus = main(['verify', sys.argv[1]])\n"
            "print('neverest.memory.store' in sys.modules, 'numpy' in sys.modules, status, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert done.stderr.split() == ["False", "False", "1"], done.stderr
    verdicts = done.stdout.splitlines()
    assert len(verdicts) == 101 and verdicts[-1].count('"too-large"') == 1 and '"ok": false' not in verdicts[0]
