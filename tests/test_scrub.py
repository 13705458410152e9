"""Scrubbing (neverest.memory.scrub): what identifies a machine, a person or a client leaves a lesson's
text wherever it stands; what carries the meaning stays; and the gates that use it, from the sentence a
model writes to what a receiver accepts and every door that shows a lesson to an agent."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import nacl.signing
import pytest

from neverest.clock import iso
from neverest.config import Config
from neverest.ctl import main
from neverest.memory import phrasing, views
from neverest.memory import scrub as scrubbing
from neverest.memory.embed import HashedEmbedder
from neverest.memory.events import ingest
from neverest.memory.model import Endpoint, Writer
from neverest.memory.queries import injections as q
from neverest.memory.queries import lessons
from neverest.memory.receive import POLICY_REFUSALS, UNSCRUBBED, receive
from neverest.memory.render import render
from neverest.memory.scrub import meaningful, scrub, scrub_check, withheld
from neverest.memory.sleep import sleep
from neverest.memory.store import Store, open_store
from neverest.records import lesson_hash, sign_lesson
from tests.fake_model import FakeModelServer
from tests.fake_model import model_server as model_server  # a fixture

NOW = datetime(2026, 4, 1, 12, tzinfo=UTC)
OTHER = nacl.signing.SigningKey(b"\x05" * 32)
OWN = "f" * 16
DEFECT = 'cat: "/home/ann/clients/acme-corp/config.yaml": No such file or directory'


@pytest.fixture(autouse=True)
def generic_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This machine's own names pinned to generic ones (an account "runner" on a host "vm"), so the
    tables below do not depend on who runs them; the real names are read again afterwards."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "runner")
    monkeypatch.setenv("HOME", str(tmp_path / "runner"))
    monkeypatch.setattr(os, "uname", lambda: SimpleNamespace(nodename="vm"))
    scrubbing.local_names.cache_clear()
    yield
    scrubbing.local_names.cache_clear()


# -- what goes ---------------------------------------------------------------------------------

REMOVED = [
    # the defect: a quoted path after "cat:", which the old rule (a path after whitespace) kept
    (DEFECT, 'cat: "a path": No such file or directory'),
    ("/home/ann/src/app/build.py fails", "a path fails"),  # at the start
    ("fails in /home/ann/src/app/build.py.", "fails in a path."),  # the sentence's full stop stays
    ("open '/srv/acme/x' failed", "open 'a path' failed"),
    ("the file `/opt/acme/etc/app.conf` is missing", "the file `a path` is missing"),
    ('pip reads "/Users/ann/Library/Application Support/pip/pip.conf"', 'pip reads "a path"'),  # spaces, quoted
    ("see (/Users/ann/proj/a.ts) for it", "see (a path) for it"),
    ("loaded [/var/lib/acme/data.db]", "loaded [a path]"),
    ("--prefix=/opt/acme/x breaks it", "--prefix=a path breaks it"),
    ("config path:/home/ann/x.toml is stale", "config path:a path is stale"),
    ("mypy: /home/ann/x.py:12:5: error", "mypy: a path: error"),  # with its line and column
    ("file:///home/ann/notes.txt is gone", "a URL is gone"),
    ("ls ~/projects/acme/x fails", "ls a path fails"),
    ("./run.sh --fast hangs", "a path --fast hangs"),
    ("import from ../lib/acme.py fails", "import from a path fails"),
    ("cd $HOME/acme/build fails", "cd a path fails"),
    ("tsc fails on src/app/page.tsx", "tsc fails on a path"),  # relative, with a file part
    ("route app/(protected)/layout.tsx renders twice", "route a path renders twice"),  # a route group
    ("route app/(protected) renders twice", "route a path renders twice"),
    ("jest cannot find src/components/ui", "jest cannot find a path"),  # three parts
    (r"fails under C:\Users\ann\proj\x.py", "fails under a path"),
    (r"fails under C:\\Users\\ann\\proj", "fails under a path"),  # JSON-escaped
    ("fails under C:/Users/ann/proj", "fails under a path"),
    (r"copy to \\fileserver\share\acme fails", "copy to a path fails"),
    (r"reads %APPDATA%\acme\x.ini", "reads a path"),
    (r"msbuild fails on src\App\Program.cs", "msbuild fails on a path"),
    # URLs, all of them, with credentials above all; e-mail addresses; remotes
    ("clone https://ann:s3cret@git.acme-corp.com/x.git fails", "clone a URL fails"),
    ("postgres://app:hunter2@10.0.0.5:5432/acme refuses", "a URL refuses"),
    ("see https://docs.python.org/3/library/re.html.", "see a URL."),
    ("(see https://github.com/acme/x/pull/3) for it", "(see a URL) for it"),
    ("see www.acme-corp.com/login for it", "see a URL for it"),
    ("mail ann@acme-corp.com about it", "mail an address about it"),
    ("git push git@github.com:acme/secret-repo.git fails", "git push a URL fails"),
    # tokens and secrets
    ("token ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4 leaked", "token a token leaked"),
    ("key sk-proj-abc123DEF456ghi789JKL0 was revoked", "key a token was revoked"),
    ("AKIAIOSFODNN7EXAMPLE has no access", "a token has no access"),
    ("slack xoxb-123456789012-abcdefghij expired", "slack a token expired"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U expired",
     "jwt a token expired"),
    ("header Authorization: Bearer abc123def456ghi789 is refused", "header Authorization: Bearer a token is refused"),
    ("login with password=hunter22 fails", "login with password=a token fails"),
    ("api_key: 'Zx81kQ0pL2' is rejected", "api_key: 'a token' is rejected"),
    ("the value a1B2c3D4e5F6g7H8i9J0k1L2m3N4 is refused", "the value a token is refused"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY----- leaked",
     "a token leaked"),
    ("LANG=de_DE.UTF-8 breaks sorting", "LANG breaks sorting"),  # the variable matters, its value may not
    ('DATABASE_URL="postgres://u:p@db/acme" is wrong', "DATABASE_URL is wrong"),
    # ids and addresses
    ("run 123e4567-e89b-12d3-a456-426614174000 failed", "run an id failed"),
    ("commit 3f9a1c2b7d4e5f60718293a4 broke it", "commit an id broke it"),
    ("container 6b2f1a9c3d4e exited", "container an id exited"),
    ("segfault at 0x7ffd5f3e2a10 in libc", "segfault at an id in libc"),
    ("interface aa:bb:cc:dd:ee:ff drops packets", "interface an id drops packets"),
    ("connect to 10.0.0.5:5432 refused", "connect to a host:5432 refused"),
    ("route to 203.0.113.7 is down", "route to a host is down"),
    ("fe80::1ff:fe23:4567:890a is unreachable", "a host is unreachable"),
    # host and user names
    ("ssh to ann-macbook.local hangs", "ssh to a host hangs"),
    ("the printer at printer.lan is offline", "the printer at a host is offline"),
    ("build01.acme-corp.com is slow to answer", "a host is slow to answer"),
    ("Anns-MacBook-Pro runs out of disk", "a host runs out of disk"),
    ("DESKTOP-4F2K9QZ blocks port 80", "a host blocks port 80"),
    ("/home/ann/x.py fails when ann's shell is zsh", "a path fails when a user's shell is zsh"),
    (r"C:\Users\zoe\x fails and Zoe retried", "a path fails and a user retried"),
    ("~bea/x is empty for bea", "a path is empty for a user"),
]


@pytest.mark.parametrize(("raw", "expected"), REMOVED)
def test_identifying_details_go_wherever_they_stand(raw: str, expected: str) -> None:
    assert scrub(raw) == expected
    assert scrub(expected) == expected  # scrubbing a scrubbed text changes nothing


# -- what stays --------------------------------------------------------------------------------

KEPT = [
    "pip install fails without --no-build-isolation",
    "pytest fails: ModuleNotFoundError: No module named foo",
    "python 3.11 and node v20.1.0 disagree on it",
    "package.json, next.config.mjs, config.yaml, .env and tsconfig.json are read at start",
    "exit code 137 after 45 minutes",
    "TCP/IP, I/O, linux/amd64 and application/json",  # two plain parts: not a path
    "actions/checkout@v4 and @types/node@20.1.0 pin it",
    "CI/CD/QA runs twice",
    "dates such as 2024/01/02 parse as text",
    "the /tmp folder fills up and /dev/null is not writable",
    "#!/usr/bin/env python3 picks the wrong python",
    "registry.npmjs.org and api.github.com rate-limit anonymous calls",
    "binds 0.0.0.0 but not 127.0.0.1 or ::1",
    "timestamps such as 12:30:45 are local time",
    "Utf8JsonReaderOptions2 is missing in net8",  # an identifier, not a key
    "std::vector and a::b",
    "threading.local leaks between tests",
    "node_modules/ grows past 2 GB",
    "the runner in CI and the root user differ",  # generic accounts are words
    "it will fail; mark the test as flaky",
    "commit abc1234 is short enough to keep",  # a 7-digit hash is no longer an id
    "Port 8080 is taken by the proxy on this host",
]


@pytest.mark.parametrize("text", KEPT)
def test_the_words_that_carry_the_meaning_stay(text: str) -> None:
    assert scrub(text) == text
    assert scrub_check(text) is None


def test_this_machines_names_go_as_words(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("USER", "zoe")
    monkeypatch.setenv("LOGNAME", "zoe")
    monkeypatch.setenv("HOME", str(tmp_path / "zoe-home"))
    monkeypatch.setattr(os, "uname", lambda: SimpleNamespace(nodename="zoe-workstation.example"))
    scrubbing.local_names.cache_clear()
    assert scrubbing.local_names() == (frozenset({"zoe", "zoe-home"}),
                                       frozenset({"zoe-workstation.example", "zoe-workstation"}))
    assert scrub("zoe-workstation runs out of memory when Zoe builds") == "a host runs out of memory when a user builds"
    assert scrub("zoey's build is fine") == "zoey's build is fine"  # a word boundary, not a prefix
    monkeypatch.setenv("USER", "will")  # a name that is an English word stays a word
    monkeypatch.setenv("LOGNAME", "will")
    scrubbing.local_names.cache_clear()
    assert scrub("it will fail") == "it will fail"


def test_the_defect_is_scrubbed_wherever_the_path_stands() -> None:
    # The path rule phrasing.py had before removed a path only after whitespace; the quote kept it.
    assert "/home/ann" not in scrub(DEFECT) and "acme-corp" not in scrub(DEFECT) and "config.yaml" not in scrub(DEFECT)
    assert phrasing.scrub is scrub  # the lessons are phrased with this module's rules


# -- the gates ---------------------------------------------------------------------------------

CHECKED = [
    (DEFECT, "a path"),
    ("Build fails in /Users/ann/proj", "a path"),
    ("ls ~/x is empty", "a path"),
    (r"fails under C:\proj\x", "a path"),
    ("/mnt/c/Users/ann/x is slow", "a path"),
    ("mail ann@acme-corp.com about it", "an e-mail address or a remote"),
    ("clone https://ann:s3cret@git.acme-corp.com/x.git fails", "a URL with credentials"),
    ("token ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4 leaked", "a token"),
    ("connect to 192.168.1.20 refused", "a private IP address"),
    ("connect to 172.20.0.3 refused", "a private IP address"),
    ("fe80::1ff:fe23:4567:890a is unreachable", "a private IP address"),
]


@pytest.mark.parametrize(("text", "reason"), CHECKED)
def test_the_receivers_gate_names_what_must_not_cross(text: str, reason: str) -> None:
    assert scrub_check(text) == reason
    assert scrub_check(scrub(text)) is None  # whatever the gate finds, scrubbing removes


@pytest.mark.parametrize("text", [
    # Scrubbed for display, but not refused: a lesson lost costs more than these words.
    "tsc fails on src/app/page.tsx",
    "gcc cannot find /usr/include/openssl/ssl.h",
    "-I/usr/include/openssl is missing",
    "GET /api/users returns 404",
    "see https://docs.python.org/3/library/re.html",
    "build01.acme-corp.com is slow",
    "commit 3f9a1c2b7d4e5f60718293a4 broke it",
    "route to 203.0.113.7 is down",
])
def test_the_receivers_gate_is_conservative(text: str) -> None:
    assert scrub_check(text) is None
    assert scrub(text) != text


@pytest.mark.parametrize(("text", "expected"), [
    ("pip install fails without --no-build-isolation", True),
    (DEFECT, True),  # "cat", "file", "directory" remain
    ("pytest fails: ModuleNotFoundError: foo", True),
    ("Expected the build to pass, but it failed on LANG", True),
    ("The person wants the agent to keep commits small", True),
    ("An error recurs: /home/ann/acme/x.py", False),  # only the template and a placeholder remain
    ("pip fails: a path", False),
    ("/home/ann/x: ann@acme.com https://acme.com", False),
    ("make fails without GNU make 4", True),  # a number counts
    ("An error recurs: exit code 1", True),
    ("The person corrected the agent's approach here", False),
    ("An error recurs in make: /home/ann/x", False),
    ("exit code", False),
    ("", False),
])
def test_meaningful(text: str, expected: bool) -> None:
    assert meaningful(text) is expected


def test_withheld_names_why_a_lesson_stays_personal() -> None:
    assert withheld("pip install fails without --no-build-isolation") is None
    assert withheld(DEFECT) == "it holds a path"
    assert withheld("tsc fails on src/app/page.tsx") == "it holds what scrubbing removes"
    assert withheld("An error recurs: a path") == "it says nothing once scrubbed"
    assert withheld(scrub(DEFECT)) is None


# -- the gates in the real code ---------------------------------------------------------------


def test_a_model_written_sentence_is_scrubbed(tmp_path: Path, model_server: FakeModelServer) -> None:
    model_server.reply = "Editable installs under /home/ann/acme/proj need build isolation turned off."
    store = open_store(tmp_path)
    for session in ("s1", "s2"):
        ingest(store, [{"kind": "error", "title": "pip install -e .", "happened": "fails without --no-build-isolation",
                        "session": session, "cwd": str(tmp_path), "at": iso(NOW)}], now=NOW)
    with Writer(Endpoint(model_server.url, "writer")) as writer:
        sleep(store, now=NOW, embedder=HashedEmbedder(), config=Config(), writer=writer)
    [text] = [r[0] for r in store.db.execute("SELECT text FROM lessons")]
    assert text == "Editable installs under a path need build isolation turned off."


def _received(store: Store, text: str, seq: int = 1) -> dict[str, object]:
    line = sign_lesson(OTHER, kind="error", text=text, seen=2, strength=1.0, updated=iso(NOW), seq=seq).raw
    return receive(store, [line], source="folder:x", own_origin=OWN, config=Config(), now=NOW).to_json()


def test_a_receiver_refuses_a_lesson_that_holds_a_path_and_says_so(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    result = _received(store, DEFECT)
    assert result["accepted"] == 0 and result["refused"] == {UNSCRUBBED: 1}
    assert store.db.execute("SELECT COUNT(*) FROM lessons").fetchone() == (0,)
    assert store.db.execute("SELECT COUNT(*) FROM records").fetchone() == (0,)  # not held, so never relayed
    assert UNSCRUBBED in POLICY_REFUSALS  # the relaying peer is not blamed for it
    assert _received(store, scrub(DEFECT), seq=2)["accepted"] == 1  # the scrubbed sentence is fine


def test_a_receiver_takes_back_its_own_records_whatever_they_hold(tmp_path: Path) -> None:
    from neverest.records import origin_of

    store = open_store(tmp_path)
    own = origin_of(bytes(OTHER.verify_key))
    line = sign_lesson(OTHER, kind="error", text=DEFECT, seen=2, strength=1.0, updated=iso(NOW), seq=1).raw
    result = receive(store, [line], source="folder:x", own_origin=own, config=Config(), now=NOW).to_json()
    assert result["refused"] == {} and result["accepted"] == 1  # else publish would sign its seq again


def test_every_door_shows_the_scrubbed_text(tmp_path: Path) -> None:
    """A received lesson whose text passes the receivers' gate but still holds what scrubbing removes:
    its stored text is signed and stays; every render of it for an agent is scrubbed."""
    from neverest.agents.hook import frame
    from neverest.agents.mcp_server import Tools
    from neverest.agents.memory_file import _line
    from neverest.agents.operations import observation
    from neverest.clock import FixedClock

    store = open_store(tmp_path)
    raw = "The artifact upload to build01.acme-corp.com times out for src/app/page.tsx"
    assert _received(store, raw)["accepted"] == 1
    clean = "The artifact upload to a host times out for a path"
    assert store.db.execute("SELECT text FROM lessons").fetchone() == (raw,)

    [lesson] = views.load(store.db, now=NOW, config=Config(), own_origin=OWN)
    render(store, tmp_path, [lesson])
    for name in ("lessons.md", "lessons.jsonl"):
        content = (tmp_path / name).read_text(encoding="utf-8")
        assert clean in content and "acme-corp" not in content and "page.tsx" not in content, name
    assert observation(lesson)["text"] == clean
    [candidate] = q.candidates(store.db)
    assert frame([candidate], "common", 1).endswith(": " + clean)
    assert _line(lesson).endswith(": " + clean)
    store.close()
    shown_by_mcp = Tools(tmp_path, FixedClock(NOW)).show(lesson.hash[:12])
    assert shown_by_mcp["text"] == clean and "acme-corp" not in json.dumps(shown_by_mcp)


# -- end to end: the defect, through the command line -----------------------------------------


def _run(tmp: Path, capsys: pytest.CaptureFixture[str], name: str, *argv: str) -> str:
    (tmp / name).mkdir(mode=0o700, exist_ok=True)
    assert main(["--home", str(tmp / name), *argv]) == 0, (name, argv)
    return capsys.readouterr().out


def test_the_defect_never_reaches_a_peer(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory A meets the defect's error, and a permission error naming the same file, twice each in a
    project published to a shared folder, sleeps and syncs; memory B syncs.  B holds what A learned, and
    nothing of the path reaches the folder, B or A's renders, byte for byte.  A lesson of A's that still
    holds a path (written by an older release) is held back, and A says so."""
    monkeypatch.setenv("NEVEREST_NOW", "2026-04-01T12:00:00Z")
    monkeypatch.setenv("NEVEREST_TRUST", "any")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))  # the agent's files stay in tmp too
    project, folder = tmp_path / "project", tmp_path / "shared"
    project.mkdir()
    run = lambda name, *argv: _run(tmp_path, capsys, name, *argv)  # noqa: E731
    denied = "Error: EACCES: permission denied, open '/home/ann/clients/acme-corp/config.yaml'"
    for session in ("s1", "s2"):
        run("A", "remember", "--kind", "error", "--title", "Bash: cat", "--happened", DEFECT, "--cwd", str(project),
            "--agent-did", "cat /home/ann/clients/acme-corp/config.yaml", "--session", session)
        run("A", "remember", "--kind", "error", "--title", "Bash: node (permission denied)", "--happened", denied,
            "--agent-did", "node /home/ann/clients/acme-corp/build.js", "--cwd", str(project), "--session", session)
    published = json.loads(run("A", "publish", "--project", str(project), "--json"))
    assert published["signed"] == 0 and published["held_back"] == 0  # nothing learned yet
    run("A", "sleep")
    own = [json.loads(line) for line in run("A", "lessons", "--json").splitlines()]
    # The missing file is one moment's symptom (no lesson); the permission error is phrased by its class.
    assert [o["text"] for o in own] == ["node fails with permission denied"]
    # A lesson an older release wrote with the path in it: held back, and said so.
    store = open_store(tmp_path / "A")
    with store.write() as db:
        text = 'Bash: cat fails: cat: "/home/ann/clients/acme-corp/config.yaml": No such file or directory'
        lessons.create(db, lessons.NewLesson(hash=lesson_hash("error", text), kind="error", text=text,
                                             cwd=str(project), strength=1.0, seen=2, created="2026-04-01T12:00:00Z",
                                             origin="", layer="personal", space=None, embedding=None, centroid=None))
    store.close()
    assert "1 lesson(s) held back" in run("A", "publish", "--project", str(project))
    assert "held back: not published, it holds a path" in run("A", "show", lesson_hash("error", text)[:12])
    assert json.loads(run("A", "status", "--json"))["held_back"] == 1
    run("A", "sleep")  # renders A's files again, the old lesson among them
    run("A", "folder", "sync", str(folder))
    run("B", "folder", "sync", str(folder))
    got = [json.loads(line) for line in run("B", "lessons", "--json").splitlines()]
    assert [g["text"] for g in got] == ["node fails with permission denied"]
    files = [p for p in folder.rglob("*") if p.is_file()] + [p for p in (tmp_path / "B").rglob("*") if p.is_file()]
    files += [tmp_path / "A" / name for name in ("lessons.md", "lessons.jsonl", "morning.md")]  # A's renders too
    assert files
    for path in files:
        data = path.read_bytes()
        for secret in (b"/home/ann", b"acme-corp", b"config.yaml", b"clients/"):
            assert secret not in data, (path, secret)
