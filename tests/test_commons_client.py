"""The commons client: against the real commons server on 127.0.0.1, and alone through an injected transport."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import nacl.signing
import pytest

from neverest.config import Config
from neverest.control import ask, running
from neverest.ctl import main as ctl
from neverest.identity import Identity, load_or_create
from neverest.memory.store import Store, open_store
from neverest.peers.directory import fetch
from neverest.records import parse, sign_lesson
from neverest.transports import commons_client
from neverest.transports.commons_protocol import MAX_INDEX_BYTES, etag_of

ERROR = ["--kind", "error", "--title", "pip install -e .", "--happened", "fails without --no-build-isolation"]
TOKEN = "test-token-0123456789"


@pytest.fixture
def commons(tmp_path: Path) -> Iterator[str]:
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKEN + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "neverest.transports.commons_server", "--listen", "127.0.0.1:0",
                             "--data", str(tmp_path / "data"), "--tokens", str(tokens)],
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        url = None
        deadline = time.monotonic() + 60
        assert proc.stderr is not None
        while url is None:  # the server says where it listens on its first lines
            assert time.monotonic() < deadline and proc.poll() is None
            line = proc.stderr.readline()
            for word in line.split():
                if word.startswith("http://127.0.0.1:"):
                    url = word.rstrip(",;.")
        # Keep reading its log, so that a full pipe never stalls the server.
        threading.Thread(target=proc.stderr.read, daemon=True).start()
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def run(capsys: pytest.CaptureFixture[str], home: Path, *argv: str) -> str:
    home.mkdir(mode=0o700, exist_ok=True)  # a named home must exist (only `init` or the default creates one)
    status = ctl(["--home", str(home), *argv])
    out = capsys.readouterr().out
    assert status == 0, (argv, out)
    return out


def test_push_then_pull_only_what_changed(commons: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEVEREST_NOW", "2026-03-01T09:00:00Z")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    a, b, project = tmp_path / "A", tmp_path / "B", tmp_path / "project"
    project.mkdir()
    for session in ("s1", "s2"):
        run(capsys, a, "remember", *ERROR, "--cwd", str(project), "--session", session)
    run(capsys, a, "publish", "--project", str(project))
    run(capsys, a, "sleep")
    pushed = json.loads(run(capsys, a, "commons", "push", commons, "--token-file", str(token_file), "--json"))
    assert pushed["records"] == 1 and pushed["conflict"] is None

    first = json.loads(run(capsys, b, "commons", "pull", commons, "--token-file", str(token_file), "--json"))
    assert (first["index_requests"], first["file_requests"], first["total"]["accepted"]) == (1, 1, 1)
    [held] = [json.loads(line) for line in run(capsys, b, "lessons", "--json").splitlines()]
    assert held["state"] == "candidate" and held["text"].startswith("pip install")
    # Up to date: one index request, answered 304, no file request.
    again = json.loads(run(capsys, b, "commons", "pull", commons, "--token-file", str(token_file), "--json"))
    assert (again["index_requests"], again["file_requests"]) == (1, 0)
    # B pushes its own (empty) file; A pulls: only B's file is fetched, not its own.
    run(capsys, b, "commons", "push", commons, "--token-file", str(token_file))
    a_pull = json.loads(run(capsys, a, "commons", "pull", commons, "--token-file", str(token_file), "--json"))
    assert a_pull["file_requests"] == 1


def test_a_wrong_token_is_a_clear_error(commons: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad"
    bad.write_text("not-the-token\n")
    (tmp_path / "A").mkdir(mode=0o700)
    assert ctl(["--home", str(tmp_path / "A"), "commons", "pull", commons, "--token-file", str(bad)]) == 1
    assert "403" in capsys.readouterr().err
    assert ctl(["--home", str(tmp_path / "A"), "commons", "pull", commons]) == 2


def test_two_writers_of_one_origin_do_not_overwrite_silently(commons: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEVEREST_NOW", "2026-03-01T09:00:00Z")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    a, project = tmp_path / "A", tmp_path / "project"
    project.mkdir()
    run(capsys, a, "commons", "push", commons, "--token-file", str(token_file))  # version 1: no records
    stale = tmp_path / "A-backup"
    shutil.copytree(a, stale)  # a backup that remembers version 1
    for session in ("s1", "s2"):
        run(capsys, a, "remember", *ERROR, "--cwd", str(project), "--session", session)
    run(capsys, a, "publish", "--project", str(project))
    run(capsys, a, "sleep")
    assert json.loads(run(capsys, a, "commons", "push", commons, "--token-file", str(token_file),
                          "--json"))["records"] == 1  # version 2
    # The restored backup pushes with its stale ETag: refused (412), reported, written once more.
    out = json.loads(run(capsys, stale, "commons", "push", commons, "--token-file", str(token_file), "--json"))
    assert out["conflict"] and "another version" in out["conflict"]


def test_the_daemon_pushes_pulls_and_announces_after_each_sleep(commons: str, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    home = tmp_path / "D"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(
        f'commons_url = "{commons}"\ncommons_token_file = "{token_file}"\n'
        f'commons_announce = "http://127.0.0.1:7428"\n')
    proc = subprocess.Popen([sys.executable, "-m", "neverest.daemon", "--home", str(home), "--listen",
                             "127.0.0.1:0", "--no-mdns"], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not running(home):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        report = ask(home, {"op": "sleep"})["report"]
        assert "error" not in report["commons"], report["commons"]
        assert report["commons"]["pull"]["index_requests"] == 1 and report["commons"]["announced"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    directory_file = tmp_path / "dir.json"
    with httpx.Client() as http:
        directory_file.write_bytes(http.get(commons + "/directory",
                                            headers={"authorization": f"Bearer {TOKEN}"}).content)
    assert fetch(str(directory_file)).peers == [("http://127.0.0.1:7428", load_or_create(home).origin)]


# -- the client alone, the network faked by an injected transport ---------------------------------

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


class FakeCommons:
    """A commons as an httpx.MockTransport handler: files by origin, ETags, conditional GETs."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.requests: list[httpx.Request] = []

    def index(self) -> bytes:
        return json.dumps([{"origin": o, "etag": etag_of(d), "records": d.count(b"\n"), "updated": "x"}
                           for o, d in sorted(self.files.items())]).encode()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        assert request.headers["authorization"] == f"Bearer {TOKEN}"
        path = request.url.path
        data = self.index() if path == "/commons/index" else self.files.get(path[len("/commons/"):-len(".jsonl")])
        if data is None:
            return httpx.Response(404, json={"error": "not-found", "message": "no file"})
        etag = etag_of(data)
        if request.headers.get("if-none-match") == etag:
            return httpx.Response(304, headers={"etag": etag})
        return httpx.Response(200, content=data, headers={"etag": etag})


@pytest.fixture
def mine(tmp_path: Path) -> Iterator[tuple[Store, Identity]]:
    home = tmp_path / "M"
    home.mkdir(mode=0o700)
    with open_store(home) as store:
        yield store, load_or_create(home)


def lesson_of(seed: int, text: str) -> bytes:
    return sign_lesson(nacl.signing.SigningKey(bytes([seed]) * 32), kind="error", text=text, seen=1, strength=1.0,
                       updated="2026-02-01T00:00:00.000000Z", seq=1).raw


def test_pull_through_an_injected_transport_fetches_only_what_changed(mine: tuple[Store, Identity]) -> None:
    store, identity = mine
    fake = FakeCommons()
    for seed in (1, 2):
        line = lesson_of(seed, f"Tool {seed} fails on the runner")
        fake.files[parse(line).origin] = line + b"\r\n\n"  # CRLF and a blank line: read as every reader does
    url = "http://commons.invalid"
    first = commons_client.pull(store, identity, url, TOKEN, Config(), NOW, transport=httpx.MockTransport(fake))
    assert (first.index_requests, first.file_requests) == (1, 2)
    assert sum(r.accepted for r in first.files.values()) == 2
    fake.requests.clear()
    again = commons_client.pull(store, identity, url, TOKEN, Config(), NOW, transport=httpx.MockTransport(fake))
    assert (again.index_requests, again.file_requests) == (1, 0)
    assert [r.headers.get("if-none-match") for r in fake.requests] == [etag_of(fake.index())]


def test_a_file_refused_for_the_storage_budget_is_read_again(mine: tuple[Store, Identity]) -> None:
    store, identity = mine
    fake = FakeCommons()
    lines = [lesson_of(seed, f"Tool {seed} fails on the runner") for seed in (1, 2)]
    for line in lines:
        fake.files[parse(line).origin] = line + b"\n"
    url = "http://commons.invalid"
    tight = Config(received_exchange_budget_bytes=len(lines[0]) + 10)  # room for one record per pull
    first = commons_client.pull(store, identity, url, TOKEN, tight, NOW, transport=httpx.MockTransport(fake))
    assert sum(r.accepted for r in first.files.values()) == 1
    assert sum(r.refused["over-budget"] for r in first.files.values()) == 1
    fake.requests.clear()
    again = commons_client.pull(store, identity, url, TOKEN, tight, NOW, transport=httpx.MockTransport(fake))
    assert again.file_requests == 1 and sum(r.accepted for r in again.files.values()) == 1


def test_an_unreachable_commons_is_told_apart_from_a_refusal(mine: tuple[Store, Identity]) -> None:
    store, identity = mine

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    def forbidden(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, json={"error": "forbidden", "message": "this token is not accepted here"})

    with pytest.raises(commons_client.CommonsUnreachable):
        commons_client.pull(store, identity, "http://c.invalid", TOKEN, Config(), NOW,
                            transport=httpx.MockTransport(down))
    with pytest.raises(commons_client.CommonsRefused, match="HTTP 403 forbidden: this token is not accepted") as err:
        commons_client.push(store, identity, "http://c.invalid", TOKEN, transport=httpx.MockTransport(forbidden))
    assert err.value.status == 403


def test_an_oversize_index_is_refused_without_being_held(mine: tuple[Store, Identity]) -> None:
    store, identity = mine
    sent = [0]

    def flood(request: httpx.Request) -> httpx.Response:
        def chunks() -> Iterator[bytes]:
            for _ in range(MAX_INDEX_BYTES // 65536 + 100):
                sent[0] += 65536
                yield b" " * 65536
        return httpx.Response(200, content=chunks())

    with pytest.raises(commons_client.CommonsRefused, match="over"):
        commons_client.pull(store, identity, "http://c.invalid", TOKEN, Config(), NOW,
                            transport=httpx.MockTransport(flood))
    assert sent[0] <= MAX_INDEX_BYTES + 2 * 65536


def test_a_push_conflict_is_reported_and_written_once_more(mine: tuple[Store, Identity]) -> None:
    store, identity = mine
    conditions: list[tuple[str | None, str | None]] = []

    def commons(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, content=b"", headers={"etag": '"theirs"'})
        conditions.append((request.headers.get("if-match"), request.headers.get("if-none-match")))
        if len(conditions) == 1:
            return httpx.Response(412, json={"error": "precondition-failed", "message": "exists"})
        return httpx.Response(200, json={}, headers={"etag": '"ours"'})

    out = commons_client.push(store, identity, "http://c.invalid", TOKEN, transport=httpx.MockTransport(commons))
    assert conditions == [(None, "*"), ('"theirs"', None)]
    assert out["etag"] == '"ours"' and "another version" in out["conflict"]
