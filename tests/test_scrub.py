"""Scrubbing: what identifies a machine or a person leaves a lesson's text wherever it stands, and a
published project leaks no path (through the CLI, two memories sharing a folder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neverest.ctl import main
from neverest.memory.publish import personal_reason
from neverest.memory.scrub import leftovers, meaningful, scrub

LEAK = 'cat: "/home/ann/clients/acme-corp/config.yaml": No such file or directory'


@pytest.mark.parametrize(("raw", "gone"), [
    (LEAK, "/home/ann"),
    ("fails in (/Users/bob/src/app/x.py) today", "/Users/bob"),
    ("reading path=/srv/data/x.csv fails", "/srv/data"),
    ("file:/etc/app/secret.conf is unreadable", "/etc/app"),
    ("open ~/work/notes.md fails", "~/work"),
    (r"fails under C:\Users\ann\proj\a.txt", "ann"),
    (r"share \\fileserver\team\x is offline", "fileserver"),
    ("git clone https://ann:hunter2@github.com/acme/app failed", "hunter2"),
    ("mail ann@example.com about it", "ann@"),
    ("token sk-abcdefghijklmnop1234 leaked", "sk-abcdef"),
    ("token ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4 leaked", "ghp_"),
    ("request 3f9a1c2b-1234-4abc-8def-0123456789ab failed", "3f9a1c2b"),
    ("commit 3f9a1c2b7d4e5f60718293a4 broke it", "3f9a1c2b7d4e"),
    ("ssh to 10.0.0.12:22 timed out", "10.0.0.12"),
    ("LANG=de_DE.UTF-8 breaks sorting", "de_DE"),
    ("ls apps/web/app/(protected)/settings fails", "(protected)"),
    ("/Users/bob/x is missing, and bob owns it", "bob"),
])
def test_identifying_details_go_wherever_they_stand(raw: str, gone: str) -> None:
    out = scrub(raw)
    assert gone not in out
    assert leftovers(out) is None
    assert scrub(out) == out  # idempotent: a shown text scrubbed again is the same


@pytest.mark.parametrize("kept", [
    "pip install fails without --no-build-isolation",
    "next.config.mjs and package.json are read at start",
    "Node 20.1.0 and python 3.11 behave differently",
    "ModuleNotFoundError: No module named 'stripe'",
    "reads and/or writes over TCP/IP",
])
def test_what_carries_the_meaning_is_kept(kept: str) -> None:
    assert scrub(kept) == kept and leftovers(kept) is None


def test_a_text_that_means_nothing_once_scrubbed_stays_personal() -> None:
    assert not meaningful("ls fails: /a/b/c")
    assert personal_reason("cat fails: a path") == "says nothing once scrubbed"
    assert personal_reason(LEAK) is not None
    assert personal_reason("pip install fails without --no-build-isolation") is None


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0, argv
    return capsys.readouterr().out


def test_a_published_project_leaks_no_path(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEVEREST_TRUST", "any")
    monkeypatch.setenv("NEVEREST_NOW", "2026-12-01T03:00:00Z")
    a, b, folder, project = tmp_path / "A", tmp_path / "B", tmp_path / "shared", tmp_path / "acme-corp"
    for path in (a, b, folder, project):
        path.mkdir(mode=0o700)
    denied = "Error: EACCES: permission denied, open '/home/ann/clients/acme-corp/config.yaml'"
    for session in ("s1", "s2"):
        run(capsys, "--home", str(a), "remember", "--kind", "error", "--title", "Bash: cat", "--happened", LEAK,
            "--agent-did", "cat /home/ann/clients/acme-corp/config.yaml", "--session", session,
            "--cwd", str(project))
        run(capsys, "--home", str(a), "remember", "--kind", "error", "--title", "Bash: node (permission denied)",
            "--agent-did", "node /home/ann/clients/acme-corp/build.js", "--happened", denied, "--session", session,
            "--cwd", str(project))
    run(capsys, "--home", str(a), "publish", "--project", str(project))
    run(capsys, "--home", str(a), "sleep")
    run(capsys, "--home", str(a), "folder", "sync", str(folder))
    run(capsys, "--home", str(b), "folder", "sync", str(folder))
    shared = b"".join(p.read_bytes() for p in folder.iterdir() if p.is_file())
    received = run(capsys, "--home", str(b), "lessons", "--all", "--json")
    own = [json.loads(line)["text"] for line in run(capsys, "--home", str(a), "lessons", "--all", "--json")
           .splitlines()]
    # Something was shared, and it says what happened without where.
    assert [json.loads(line)["text"] for line in received.splitlines()] == ["node fails with permission denied"]
    for leaked in ("/home/ann", "acme-corp", "config.yaml", "clients"):
        assert leaked.encode() not in shared
        assert leaked not in received
        assert all(leaked not in text for text in own)
