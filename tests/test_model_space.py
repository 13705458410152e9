"""The model's space, end to end: replay and the hook ask a real model server on 127.0.0.1 (a tiny model that
reads words, tests/fake_model.py), store and compare vectors in its space, and fall back to the hashed space,
quickly, when it is down or slow."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from neverest.agents import hook, hook_model
from neverest.agents.replay import replay
from neverest.clock import iso
from neverest.config import Config
from neverest.memory.embed import HASHED_SPACE, hashed_vector, to_blob, unit
from neverest.memory.store import open_store
from neverest.records import lesson_hash
from tests.fake_model import FakeModelServer, words_row
from tests.fake_model import model_server as model_server  # a fixture
from tests.test_replay import line, session

NOW = datetime(2026, 4, 1, tzinfo=UTC)
DIM = 64
SPACE = "model:tiny"
LESSON = "pip install fails behind the corporate proxy unless the index url is set"
PROMPT = "pip install keeps failing behind the proxy, what is wrong?"
ROUTE_PROMPT = "why do shell commands on the route group folder fail?"


def _tiny(text: str) -> bytes:
    return to_blob(unit(np.array(words_row(text, DIM))))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server(model_server: FakeModelServer) -> FakeModelServer:
    model_server.row = words_row
    model_server.dim = DIM
    return model_server


def _home(tmp_path: Path, url: str) -> Path:
    """A memory whose one lesson was embedded in the tiny model's space by a sleep, with that model configured."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(f'embed_url = "{url}"\nembed_model = "tiny"\n')
    store = open_store(home)
    with store.write() as db:
        db.execute("INSERT INTO lessons (hash, kind, text, cwd, strength, seen, created, updated, space, embedding) "
                   "VALUES (?, 'error', ?, '', 1.0, 2, ?, ?, ?, ?)",
                   (lesson_hash("error", LESSON), LESSON, iso(NOW), iso(NOW), SPACE, _tiny(LESSON)))
    store.close()
    return home


def _prompt(home: Path, session: str, prompt: str = PROMPT) -> tuple[str, list[str], float]:
    """The hook's answer to a prompt, in this process (the deadline and clock as the hook sets them), what
    --explain said, and how long it took."""
    notes: list[str] = []
    raw = json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": session, "cwd": "/work/shop",
                      "prompt": prompt}).encode()
    started = time.monotonic()
    out = hook.respond(raw, home, holdout=0.0, deadline=started + hook.DEADLINE_S, notes=notes)
    return out, notes, time.monotonic() - started


@pytest.fixture(autouse=True)
def _clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEVEREST_NOW", iso(NOW))
    for name in (hook_model.URL_ENV, hook_model.MODEL_ENV):
        monkeypatch.delenv(name, raising=False)


def test_the_hook_matches_a_prompt_in_the_models_space(tmp_path: Path, server: FakeModelServer) -> None:
    home = _home(tmp_path, server.url)
    out, notes, _ = _prompt(home, "s1")
    assert LESSON in out
    # The prompt itself went to the model, alone: the hook's own query.
    assert any(request["input"] == [PROMPT] and request["model"] == "tiny" for _, _, request in server.requests)
    assert any("the model's space (model:tiny): 1 lesson(s) compared in it" in n for n in notes)


def test_the_models_verdict_is_the_one_used(tmp_path: Path, server: FakeModelServer) -> None:
    """A model that puts the prompt far from the lesson keeps it out, though the hashed space would give it:
    the decision is made in the model's space."""
    home = _home(tmp_path, server.url)
    server.row = lambda text, dim: [-x for x in words_row(text, dim)]  # every query opposite to the lessons
    out, notes, _ = _prompt(home, "s1")
    assert out == ""
    assert any("0 bear on it" in n and "1 more share them but score below" in n for n in notes)
    # The same memory without the model gives the lesson (two key terms, hashed cosine above the floor).
    (home / "config.toml").write_text("")
    assert LESSON in _prompt(home, "s2")[0]


def test_a_model_that_is_down_leaves_the_hook_in_the_hashed_space(tmp_path: Path) -> None:
    home = _home(tmp_path, f"http://127.0.0.1:{_closed_port()}/v1")
    out, notes, took = _prompt(home, "s1")
    assert LESSON in out  # from the hashed space
    assert took < hook_model.TIMEOUT_S + 0.5
    assert any("not used, the hashed space instead" in n for n in notes)
    assert (home / hook_model.LATCH_FILE).read_text() == NOW.isoformat()


def test_a_slow_model_costs_one_prompt_its_time_limit_then_is_not_asked(tmp_path: Path,
                                                                      server: FakeModelServer) -> None:
    home = _home(tmp_path, server.url)
    server.mode, server.delay_s = "slow", 3.0
    out, notes, took = _prompt(home, "s1")
    assert LESSON in out
    assert hook_model.TIMEOUT_S <= took < hook_model.TIMEOUT_S + 0.5
    asked = len(server.requests)
    out, notes, took = _prompt(home, "s2")
    assert LESSON in out and took < 0.2
    assert len(server.requests) == asked  # latched: not asked again within RETRY_AFTER_S
    assert any("not asked" in n for n in notes)


def test_the_hook_process_answers_with_the_model_configured(tmp_path: Path, server: FakeModelServer) -> None:
    """As the agent runs it: a process, the model's address from config.toml."""
    home = _home(tmp_path, server.url)
    payload = {"hook_event_name": "UserPromptSubmit", "session_id": "s1", "cwd": "/work/shop", "prompt": PROMPT}
    done = subprocess.run([sys.executable, "-m", "neverest.agents.hook"], input=json.dumps(payload).encode(),
                          capture_output=True, timeout=30, check=True,
                          env={"NEVEREST_HOME": str(home), "NEVEREST_NOW": iso(NOW), "NEVEREST_HOLDOUT": "0",
                               "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    answer = json.loads(done.stdout)
    assert LESSON in answer["hookSpecificOutput"]["additionalContext"]
    assert any(request["input"] == [PROMPT] for _, _, request in server.requests)


def test_the_configuration_names_the_model_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert hook_model.configured(tmp_path) is None  # no config.toml
    (tmp_path / "config.toml").write_text('trust = "any"\n')
    assert hook_model.configured(tmp_path) is None
    (tmp_path / "config.toml").write_text('embed_url = "http://127.0.0.1:1/v1"\n')
    assert hook_model.configured(tmp_path) is None  # a URL without a model name
    (tmp_path / "config.toml").write_text('embed_url = "http://127.0.0.1:1/v1"\nembed_model = "m"\n')
    assert hook_model.configured(tmp_path) == ("http://127.0.0.1:1/v1", "m")
    monkeypatch.setenv(hook_model.MODEL_ENV, "other")  # the environment wins, as in neverest.config
    assert hook_model.configured(tmp_path) == ("http://127.0.0.1:1/v1", "other")


def _corpus(tmp_path: Path) -> Path:
    """test_replay's sessions (a route-group mistake learned on day 1, repeated on day 3), the day-3 session
    opening with a prompt about it."""
    root = tmp_path / "claude" / "-home-ann-src-web"
    root.mkdir(parents=True)
    for sid, day in (("s1", 1), ("s2", 1), ("s3", 3)):
        lines = session(sid, day)
        if sid == "s3":
            lines[0] = line("user", ROUTE_PROMPT, sid, "2026-11-03T10:00:00.000Z")
        (root / f"{sid}.jsonl").write_text("".join(x + "\n" for x in lines))
    return tmp_path / "claude"


def test_replay_runs_in_the_models_space(tmp_path: Path, server: FakeModelServer) -> None:
    report = replay(_corpus(tmp_path), None, config=Config(embed_url=server.url, embed_model="tiny"))
    assert report.space == SPACE
    # The lesson's vector is in the model's space, and so are the episodes of the days before the last: the
    # last session's are stored hashed, as every event is, until a night or a recall moves them.
    assert report.stored["lessons"] == {SPACE: 1}
    assert report.stored["episodes"] == {SPACE: 4, HASHED_SPACE: 2}
    assert report.lessons == 1 and (report.repeats, report.memory.caught, report.memory.missed) == (1, 1, 0)
    texts = [request["input"] for _, _, request in server.requests]
    # The hook asked the model for the prompt alone (its own client); the replay embedded the session's texts.
    assert [ROUTE_PROMPT] in texts
    assert any(ROUTE_PROMPT in batch and len(batch) > 1 for batch in texts)
    assert report.to_json()["space"] == SPACE


def test_replay_with_the_model_down_runs_in_the_hashed_space(tmp_path: Path) -> None:
    config = Config(embed_url=f"http://127.0.0.1:{_closed_port()}/v1", embed_model="tiny")
    report = replay(_corpus(tmp_path), None, config=config)
    assert report.space == HASHED_SPACE
    assert set(report.stored["lessons"]) == {HASHED_SPACE}
    assert (report.repeats, report.memory.caught) == (1, 1)


def test_replay_flags_name_the_model(tmp_path: Path, server: FakeModelServer, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from neverest.ctl import main

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("NEVEREST_HOME", str(home))
    corpus = _corpus(tmp_path)
    assert main(["replay", "--claude", str(corpus), "--embed-url", server.url, "--embed-model", "tiny",
                 "--json"]) == 0
    out = capsys.readouterr().out
    assert "in the model:tiny space" in out and json.loads(out.splitlines()[-1])["space"] == SPACE
    assert main(["replay", "--claude", str(corpus), "--embed-url", server.url]) == 2
    assert "go together" in capsys.readouterr().err
    assert main(["replay", "--claude", str(corpus), "--embed-url", "ftp://x", "--embed-model", "m"]) == 2
    assert list(home.iterdir()) == []


def test_the_tiny_model_is_not_the_hashed_space() -> None:
    """The tests above would prove nothing if the fake model's vectors were the hashed space's."""
    tiny = np.frombuffer(_tiny(LESSON), dtype="<f4")
    assert tiny.shape == (DIM,) and float(tiny @ hashed_vector(LESSON)[:DIM]) < 0.9


# ("ragged" is no error for one query: a vector of another length is left out where it is compared, in rank.)
@pytest.mark.parametrize("mode", ["500", "garbage", "big", "nan", "strings", "rows", "no-data", "trickle"])
def test_a_wrong_answer_is_no_vector_and_is_remembered(tmp_path: Path, server: FakeModelServer, mode: str) -> None:
    server.mode = mode
    latch = tmp_path / hook_model.LATCH_FILE
    query = hook_model.ModelQuery(server.url, "tiny", latch=latch, now=NOW)
    started = time.monotonic()
    assert query.vector(PROMPT) is None
    assert time.monotonic() - started < hook_model.TIMEOUT_S + 0.3  # the trickling server is cut at the limit
    assert query.last_error and latch.read_text() == NOW.isoformat()


def test_answers_are_read_with_a_length_kept_alive_or_chunked(server: FakeModelServer) -> None:
    """The plain-socket client reads an answer whose connection stays open (HTTP/1.1 with a length, as
    benchmarks/embed_server.py answers), one that ends when the connection closes, and a chunked one."""
    expected = unit(np.array(words_row(PROMPT, DIM)))
    for mode in ("ok", "big-stream"):  # big-stream: no length, the body ends when the connection closes
        server.mode = mode
        found = hook_model.ModelQuery(server.url, "tiny").vector(PROMPT)
        assert found is not None and np.allclose(found, expected, atol=1e-6)

    class Chunked(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            body = json.dumps({"data": [{"index": 0, "embedding": words_row(request["input"][0], DIM)}]}).encode()
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(body), 100):
                part = body[start:start + 100]
                self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    chunked = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Chunked)
    thread = threading.Thread(target=chunked.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        found = hook_model.ModelQuery(f"http://127.0.0.1:{chunked.server_address[1]}/v1", "tiny").vector(PROMPT)
        assert found is not None and np.allclose(found, expected, atol=1e-6)
    finally:
        chunked.shutdown()
        chunked.server_close()
        thread.join()
