"""The project log (neverest/relay.py): its lines, its key, its bounds, rotation, durability, the handoff."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from neverest import relay

T0 = datetime(2026, 11, 14, 10, 0, tzinfo=UTC)


def add(home: Path, project: str, text: str, *, model: str = "gpt-4o", role: str = "user", kind: str = "user",
        at: datetime = T0) -> None:
    relay.append(home, project, model=model, role=role, kind=kind, text=text, now=at)


def test_a_line_holds_the_protocol_fields_and_lands_in_the_projects_file(tmp_path: Path) -> None:
    add(tmp_path, "/src/shop/", "fix the login page")
    current, rotated = relay.relay_paths(tmp_path, "/src/shop")
    assert current.parent == tmp_path / "relay" and not rotated.exists()
    assert current.name == relay.project_key("/src/shop") + ".jsonl"
    line = json.loads(current.read_bytes())
    assert line == {"at": "2026-11-14T10:00:00.000000Z", "project": "/src/shop", "model": "gpt-4o", "role": "user",
                    "kind": "user", "text": "fix the login page"}
    assert oct(current.stat().st_mode & 0o777) == "0o600"
    assert oct(current.parent.stat().st_mode & 0o777) == "0o700"


def test_the_project_key_is_a_stable_slug_and_hash_of_the_normalised_project(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    key = relay.project_key("/src/My Shop")
    assert key.startswith("my-shop-") and len(key) == len("my-shop-") + 16
    assert relay.project_key("/src/My Shop/") == relay.project_key("/src/x/../My Shop") == key
    assert relay.project_key("/other/My Shop") != key  # two folders of one name never share a log
    monkeypatch.chdir(tmp_path)
    assert relay.project_name("./app") == str(tmp_path / "app")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert relay.project_name("~/app") == str(tmp_path / "app")
    assert relay.project_name("  shop  ") == "shop"  # a name, not a path
    assert relay.project_key("shop").startswith("shop-")
    assert relay.project_key("日本").startswith("project-")
    with pytest.raises(relay.RelayError):
        relay.project_name("  ")


def test_lines_are_checked_and_bounded(tmp_path: Path) -> None:
    with pytest.raises(relay.RelayError, match="kind"):
        add(tmp_path, "p", "x", kind="command")
    with pytest.raises(relay.RelayError, match="role"):
        add(tmp_path, "p", "x", role="system")
    with pytest.raises(relay.RelayError, match="empty"):
        add(tmp_path, "p", "  \n ")
    long = "head " + "x" * 20000 + " the end"
    add(tmp_path, "p", long, model="m" * 500, role="assistant", kind="assistant")
    (e,) = relay.entries(tmp_path, "p")
    assert len(e.text) <= relay.MAX_TEXT_CHARS and e.text.startswith("head ") and e.text.endswith(" the end")
    assert "characters cut" in e.text and len(e.model) == relay.MAX_MODEL_CHARS
    add(tmp_path, "p", "bad \udcff bytes")
    assert relay.entries(tmp_path, "p")[-1].text == "bad ? bytes"


def test_a_full_file_is_rotated_once_and_the_oldest_lines_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay, "MAX_FILE_BYTES", 2000)
    for i in range(60):
        add(tmp_path, "p", f"message {i:02d} " + "y" * 40, at=T0 + timedelta(seconds=i))
    current, rotated = relay.relay_paths(tmp_path, "p")
    assert current.stat().st_size <= 2000 and rotated.stat().st_size <= 2000
    assert sorted(p.name for p in (tmp_path / "relay").iterdir()) == sorted([current.name, rotated.name])
    held = [e.text[:10] for e in relay.entries(tmp_path, "p")]
    assert held[-1] == "message 59" and "message 00" not in held
    assert held == sorted(held)  # the rotated file's lines, then the current one's, in order
    assert [e.text[:10] for e in relay.newest(tmp_path, "p")] == held[::-1]


def test_last_model_passes_over_the_persons_notes(tmp_path: Path) -> None:
    assert relay.last_model(tmp_path, "p") is None
    add(tmp_path, "p", "hello", model="claude-sonnet")
    add(tmp_path, "p", "shipped 1.2", model="", role="note", kind="deploy")
    assert relay.last_model(tmp_path, "p") == "claude-sonnet"
    add(tmp_path, "p", "hi", model="gpt-4o", role="assistant", kind="assistant")
    assert relay.last_model(tmp_path, "p") == "gpt-4o"


def test_the_handoff_shows_recent_work_and_always_the_corrections_and_deploys(tmp_path: Path) -> None:
    add(tmp_path, "/src/shop", "no, use pnpm, not npm", kind="correction")
    add(tmp_path, "/src/shop", "shipped the login fix to staging", model="", role="note", kind="deploy")
    for i in range(30):
        add(tmp_path, "/src/shop", f"step {i}", model="gpt-4o", role="assistant", kind="assistant",
            at=T0 + timedelta(minutes=i))
    data = relay.handoff_data(tmp_path, "/src/shop", limit=5)
    assert [e.text for e in data.recent] == [f"step {i}" for i in range(25, 30)]
    assert [e.text for e in data.corrections] == ["no, use pnpm, not npm"]
    assert [e.text for e in data.deploys] == ["shipped the login fix to staging"]
    assert data.last_model == "gpt-4o" and data.project == "/src/shop"
    text = relay.handoff(tmp_path, "/src/shop", limit=5)
    assert "not instructions" in text and "step 29" in text and "step 24" not in text
    assert "the person (to gpt-4o): no, use pnpm, not npm" in text and "shipped the login fix" in text
    only = data.text(work=False)
    assert "step 29" not in only and "use pnpm" in only and "shipped" in only
    assert json.loads(json.dumps(data.to_json()))["corrections"][0]["kind"] == "correction"
    assert relay.handoff(tmp_path, "/src/nothing") == ""


def test_the_handoff_text_is_bounded(tmp_path: Path) -> None:
    for i in range(40):
        add(tmp_path, "p", f"{i} " + "word " * 1500, role="assistant", kind="assistant")
    text = relay.handoff(tmp_path, "p", limit=40)
    assert len(text) <= relay.MAX_HANDOFF_CHARS and "39 word" in text


def test_a_line_cut_by_a_crash_costs_only_itself(tmp_path: Path) -> None:
    add(tmp_path, "p", "before")
    current, _ = relay.relay_paths(tmp_path, "p")
    with open(current, "ab") as f:
        f.write(b'{"at": "2026-11-14T10:00:00Z", "proj')  # a write cut half way
    add(tmp_path, "p", "after")
    assert [e.text for e in relay.entries(tmp_path, "p")] == ["before", "after"]
    assert [e.text for e in relay.newest(tmp_path, "p")] == ["after", "before"]


def test_writers_in_parallel_lose_and_mix_no_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay, "MAX_FILE_BYTES", 64 * 1024)

    def writer(n: int) -> None:
        for i in range(100):
            add(tmp_path, "p", f"w{n}-{i:03d} " + "z" * 100)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held = [e.text.split()[0] for e in relay.entries(tmp_path, "p")]
    assert len(held) == len(set(held))
    for n in range(4):  # each writer's lines in its order, the newest ones all there
        mine = [h for h in held if h.startswith(f"w{n}-")]
        assert mine == sorted(mine) and mine[-1] == f"w{n}-099"
    raw = b"".join(p.read_bytes() for p in relay.files(tmp_path))
    assert all(json.loads(line) for line in raw.splitlines())  # every line whole


_WRITER = """
import sys
from datetime import UTC, datetime
from pathlib import Path
from neverest import relay
home = Path(sys.argv[1])
for i in range(100000):
    relay.append(home, "p", model="m", role="user", kind="user", text=f"line {i}", now=datetime.now(UTC))
    print(i, flush=True)
"""


def test_an_acknowledged_line_survives_kill_9(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    acked = -1
    try:
        for line in proc.stdout:
            acked = int(line)
            if acked >= 50:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    held = {e.text for e in relay.entries(tmp_path, "p")}
    assert all(f"line {i}" in held for i in range(acked + 1))


def test_forget_removes_a_project_or_the_lines_before_a_time(tmp_path: Path) -> None:
    for i in range(4):
        add(tmp_path, "a", f"a{i}", at=T0 + timedelta(days=i))
        add(tmp_path, "b", f"b{i}", at=T0 + timedelta(days=i))
    result = relay.forget(tmp_path, before=T0 + timedelta(days=2))
    assert result.lines == 4 and result.files == 0
    assert [e.text for e in relay.entries(tmp_path, "a")] == ["a2", "a3"]
    result = relay.forget(tmp_path, project="a")
    assert result.to_json() == {"lines": 2, "files": 1}
    assert relay.entries(tmp_path, "a") == [] and len(relay.entries(tmp_path, "b")) == 2
    assert relay.forget(tmp_path, before=T0 + timedelta(days=9)).files == 1
    assert relay.files(tmp_path) == []
    add(tmp_path, "a", "again")  # the writer makes the file again
    assert [e.text for e in relay.entries(tmp_path, "a")] == ["again"]
    assert relay.projects(tmp_path) == ["a"]


def test_forget_and_export_cover_the_project_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from neverest.ctl import main

    home = tmp_path / "home"
    assert main(["--home", str(home), "init"]) == 0
    add(home, "/src/a", "old words", at=T0)
    add(home, "/src/a", "new words", at=T0 + timedelta(days=10))
    add(home, "/src/b", "b words", at=T0 + timedelta(days=10))
    capsys.readouterr()
    assert main(["--home", str(home), "export"]) == 0
    exported = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["project"], e["text"]) for e in exported if e["type"] == "relay"] == \
        [("/src/a", "old words"), ("/src/a", "new words"), ("/src/b", "b words")]
    assert main(["--home", str(home), "forget", "--before", "2026-11-20", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["relay_lines"] == 1
    assert main(["--home", str(home), "forget", "--relay", "/src/b/"]) == 0
    assert capsys.readouterr().out.strip() == "forgot the project log of /src/b: 1 line(s)"
    assert main(["--home", str(home), "forget", "--relay", "/src/b", "--before", "2026-01-01"]) == 2
    assert main(["--home", str(home), "export"]) == 0
    exported = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["text"] for e in exported if e["type"] == "relay"] == ["new words"]
    assert b"old words" not in b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file())


def test_the_index_reads_only_what_was_appended_and_agrees_with_a_full_read(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay, "MAX_FILE_BYTES", 3000)
    index = relay.LogIndex(limit=5)
    assert index.handoff_data(tmp_path, "p").empty
    for i in range(80):
        kind = "correction" if i % 7 == 0 else "deploy" if i % 11 == 0 else "user"
        add(tmp_path, "p", f"line {i}", kind=kind, role="note" if kind == "deploy" else "user",
            model="" if i % 3 else f"m{i}", at=T0 + timedelta(seconds=i))
        if i % 9 == 0:  # asked now and then, across rotations
            assert index.handoff_data(tmp_path, "p") == relay.handoff_data(tmp_path, "p", limit=5)
    assert index.handoff_data(tmp_path, "p") == relay.handoff_data(tmp_path, "p", limit=5)
    current, _ = relay.relay_paths(tmp_path, "p")
    with open(current, "ab") as f:
        f.write(b'{"at": "2026')  # a line being written: not read until whole
    assert index.handoff_data(tmp_path, "p") == relay.handoff_data(tmp_path, "p", limit=5)
    relay.forget(tmp_path, before=T0 + timedelta(seconds=75))
    assert index.handoff_data(tmp_path, "p") == relay.handoff_data(tmp_path, "p", limit=5)
    relay.forget(tmp_path, project="p")
    assert index.handoff_data(tmp_path, "p").empty
