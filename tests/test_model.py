"""The model clients against a real OpenAI-compatible server on 127.0.0.1 that misbehaves on request.

Every failure must fail soft: the embedder answers from the hashed space and says why in
``last_error``, the writer answers None; neither ever raises.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import httpx
import numpy as np
import pytest

from neverest.memory.embed import HASHED_SPACE, MAX_MODEL_TEXT_CHARS, HashedEmbedder, ModelEmbedder, unit
from neverest.memory.model import MAX_ANSWER_CHARS, Endpoint, ModelClient, ModelError, Writer
from tests.fake_model import FakeModelServer, model_row
from tests.fake_model import model_server as model_server  # a fixture

MODEL = "tiny"
TEXTS = ["pip install fails without --no-build-isolation", "the person prefers tabs", "pytest hangs on CI"]


@pytest.fixture
def server(model_server: FakeModelServer) -> FakeModelServer:
    return model_server


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def expected(texts: list[str], dim: int = 8) -> np.ndarray:
    return unit([model_row(t, dim) for t in texts])


# --- the embedder, when the model answers -------------------------------------------------------


def test_embeds_in_the_model_space(server: FakeModelServer) -> None:
    embedder = ModelEmbedder(Endpoint(server.url, MODEL, api_key="sekrit"))
    assert embedder.probe() == "model:tiny"
    got = embedder.embed_with_space(TEXTS)
    assert got.space == embedder.space == "model:tiny"
    assert embedder.last_error is None and embedder.dim == 8
    assert got.vectors.dtype == np.float32 and got.vectors.shape == (3, 8)
    np.testing.assert_allclose(np.linalg.norm(got.vectors, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(got.vectors, expected(TEXTS))
    path, headers, request = server.requests[-1]
    assert path == "/v1/embeddings"
    assert request == {"model": MODEL, "input": TEXTS}
    assert headers["Authorization"] == "Bearer sekrit"
    embedder.close()


def test_batches_and_never_sends_blank_texts(server: FakeModelServer) -> None:
    texts = ["alpha", "", "beta", "  \n", "gamma"]
    with ModelEmbedder(Endpoint(server.url, MODEL), batch_size=2) as embedder:
        vectors = embedder.embed(texts)
    assert [r[2]["input"] for r in server.requests] == [["alpha", "beta"], ["gamma"]]
    assert "Authorization" not in server.requests[0][1]
    assert not vectors[1].any() and not vectors[3].any()
    np.testing.assert_array_equal(vectors[[0, 2, 4]], expected(["alpha", "beta", "gamma"]))


def test_only_blank_texts_still_get_the_model_dimension(server: FakeModelServer) -> None:
    with ModelEmbedder(Endpoint(server.url, MODEL)) as embedder:
        got = embedder.embed_with_space(["", " "])
    assert got.space == "model:tiny" and got.vectors.shape == (2, 8) and not got.vectors.any()
    assert len(server.requests) == 1  # one probe, to learn the dimension


def test_rows_are_placed_by_their_index(server: FakeModelServer) -> None:
    server.mode = "reversed"
    with ModelEmbedder(Endpoint(server.url, MODEL)) as embedder:
        np.testing.assert_array_equal(embedder.embed(TEXTS), expected(TEXTS))


def test_awkward_texts_still_reach_the_model(server: FakeModelServer) -> None:
    """One odd text must not cost the whole batch its model space."""
    surrogate = "no module named caf\udce9"  # a file name decoded with surrogateescape
    long = "word " * 5000
    with ModelEmbedder(Endpoint(server.url, MODEL)) as embedder:
        got = embedder.embed_with_space([surrogate, long])
    assert got.space == "model:tiny", embedder.last_error
    assert server.requests[-1][2]["input"] == [surrogate, long[:MAX_MODEL_TEXT_CHARS]]
    np.testing.assert_array_equal(got.vectors, expected([surrogate, long[:MAX_MODEL_TEXT_CHARS]]))


def test_empty_input_makes_no_request_once_the_dimension_is_known(server: FakeModelServer) -> None:
    with ModelEmbedder(Endpoint(server.url, MODEL)) as embedder:
        embedder.probe()
        assert embedder.embed([]).shape == (0, 8)
    assert len(server.requests) == 1


# --- the embedder, when the model fails ----------------------------------------------------------


def assert_fell_back(embedder: ModelEmbedder, texts: list[str], reason: str) -> None:
    got = embedder.embed_with_space(texts)
    assert got.space == embedder.space == HASHED_SPACE
    assert embedder.dim == 256
    np.testing.assert_array_equal(got.vectors, HashedEmbedder().embed(texts))
    assert embedder.last_error is not None and reason in embedder.last_error, embedder.last_error


@pytest.mark.parametrize(("mode", "reason"), [
    ("500", "HTTP 500"),
    ("garbage", "not valid JSON"),
    ("no-data", "no data list"),
    ("rows", "2 rows for 3 texts"),
    ("index", "0..n-1 once each"),
    ("not-object", "not an object"),
    ("nan", "not valid JSON"),
    ("infinity", "not finite"),
    ("float32-overflow", "not finite"),
    ("ragged", "not rows of one length"),
    ("strings", "not lists of numbers"),
    ("nulls", "not lists of numbers"),
    ("big", "over the 65536-byte limit"),
    ("big-stream", "over the 65536-byte limit"),
])
def test_a_bad_answer_falls_back_to_the_hashed_space(server: FakeModelServer, mode: str, reason: str) -> None:
    server.mode = mode
    with ModelEmbedder(Endpoint(server.url, MODEL, max_body_bytes=65536)) as embedder:
        assert_fell_back(embedder, TEXTS, reason)


def test_the_error_body_is_quoted_in_the_reason(server: FakeModelServer) -> None:
    server.mode = "500"
    with ModelEmbedder(Endpoint(server.url, MODEL)) as embedder:
        assert_fell_back(embedder, TEXTS, "the model exploded")


def test_connection_refused_falls_back() -> None:
    with ModelEmbedder(Endpoint(closed_port_url(), MODEL)) as embedder:
        assert embedder.probe() == HASHED_SPACE
        assert_fell_back(embedder, TEXTS, "cannot reach")


def test_a_slow_model_times_out_and_falls_back(server: FakeModelServer) -> None:
    server.mode = "slow"
    started = time.monotonic()
    with ModelEmbedder(Endpoint(server.url, MODEL, read_timeout_s=0.3)) as embedder:
        assert_fell_back(embedder, TEXTS, "timed out")
    assert time.monotonic() - started < server.delay_s - 0.5


def test_a_trickling_answer_hits_the_total_timeout(server: FakeModelServer) -> None:
    server.mode = "trickle"
    started = time.monotonic()
    with ModelEmbedder(Endpoint(server.url, MODEL, read_timeout_s=1.0, total_timeout_s=0.5)) as embedder:
        assert_fell_back(embedder, TEXTS, "took over 0.5 s")
    assert time.monotonic() - started < 2.5


@pytest.mark.parametrize(("dim", "reason"), [(16, "16 dimensions after 8"), (8193, "outside 1..8192")])
def test_a_change_of_dimension_falls_back(server: FakeModelServer, dim: int, reason: str) -> None:
    with ModelEmbedder(Endpoint(server.url, MODEL)) as embedder:
        assert embedder.probe() == "model:tiny"
        server.dim = dim
        assert_fell_back(embedder, TEXTS, reason)


def test_a_failure_latches_the_hashed_space_until_the_next_probe(server: FakeModelServer) -> None:
    """A sleep's run stays in one space: after a failure no call waits on the model again."""
    with ModelEmbedder(Endpoint(server.url, MODEL)) as embedder:
        server.mode = "500"
        assert embedder.probe() == HASHED_SPACE
        server.mode = "ok"
        sent = len(server.requests)
        assert_fell_back(embedder, TEXTS, "HTTP 500")
        assert len(server.requests) == sent
        assert embedder.probe() == "model:tiny"
        assert embedder.last_error is None
        np.testing.assert_array_equal(embedder.embed(TEXTS), expected(TEXTS))


def test_a_failing_batch_puts_the_whole_call_in_the_hashed_space(server: FakeModelServer) -> None:
    with ModelEmbedder(Endpoint(server.url, MODEL), batch_size=2) as embedder:
        embedder.probe()
        server.dim = 9  # every batch after the probe now disagrees with it
        assert_fell_back(embedder, TEXTS, "9 dimensions after 8")


def test_a_str_is_not_a_list_of_texts(server: FakeModelServer) -> None:
    with ModelEmbedder(Endpoint(server.url, MODEL)) as embedder, pytest.raises(TypeError):
        embedder.embed("one text")


@pytest.mark.parametrize("kwargs", [
    {"base_url": "ftp://127.0.0.1/v1"},
    {"base_url": "http:///v1"},
    {"model": "  "},
    {"api_key": "clé"},
    {"read_timeout_s": 0},
    {"max_body_bytes": -1},
])
def test_a_misconfigured_endpoint_is_refused_loudly(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Endpoint(**{"base_url": "http://127.0.0.1:11434/v1", "model": MODEL, **kwargs})


# --- the writer --------------------------------------------------------------------------------


def test_writes_one_line(server: FakeModelServer) -> None:
    server.reply = "\n  The build fails   without the flag.  \nA second line that is dropped."
    with Writer(Endpoint(server.url, "writer", api_key="k"), max_tokens=50) as writer:
        assert writer.write("What happened?", "Answer with one observation.") == "The build fails without the flag."
        assert writer.last_error is None
    path, headers, request = server.requests[-1]
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer k"
    assert request == {
        "model": "writer",
        "messages": [{"role": "system", "content": "Answer with one observation."},
                     {"role": "user", "content": "What happened?"}],
        "temperature": 0,
        "max_tokens": 50,
    }


def test_thinking_and_control_characters_are_removed(server: FakeModelServer) -> None:
    server.reply = "<think>\nThe user wants...\n</think>\n\nThe\x1b[31m build\ttimes out."
    with Writer(Endpoint(server.url, "writer")) as writer:
        assert writer.write("p", "s") == "The [31m build times out."


def test_a_long_answer_is_cut_at_a_word(server: FakeModelServer) -> None:
    server.reply = " ".join(["observation"] * 100)
    with Writer(Endpoint(server.url, "writer")) as writer:
        line = writer.write("p", "s")
    assert line is not None and len(line) <= MAX_ANSWER_CHARS
    assert line == " ".join(["observation"] * 25)  # 25 × "observation " is exactly 300 characters
    server.reply = "x" * 1000  # no space to cut at
    with Writer(Endpoint(server.url, "writer")) as writer:
        assert writer.write("p", "s") == "x" * MAX_ANSWER_CHARS


@pytest.mark.parametrize(("mode", "reply", "reason"), [
    ("500", "", "HTTP 500"),
    ("garbage", "", "not valid JSON"),
    ("big", "", "over the 65536-byte limit"),
    ("no-content", "", "no choices[0].message.content"),
    ("ok", " \n\t\n", "empty"),
    ("ok", "<think>only thinking</think>", "empty"),
    ("slow", "", "timed out"),
])
def test_the_writer_fails_soft(server: FakeModelServer, mode: str, reply: str, reason: str) -> None:
    server.mode = mode
    server.reply = reply
    endpoint = Endpoint(server.url, "writer", read_timeout_s=0.3, max_body_bytes=65536)
    with Writer(endpoint) as writer:
        assert writer.write("p", "s") is None
        assert writer.last_error is not None and reason in writer.last_error, writer.last_error
        server.mode, server.reply = "ok", "It works again."
        assert writer.write("p", "s") == "It works again."
        assert writer.last_error is None


def test_the_writer_fails_soft_when_nothing_listens() -> None:
    with Writer(Endpoint(closed_port_url(), "writer")) as writer:
        assert writer.write("p", "s") is None
        assert writer.last_error is not None and "cannot reach" in writer.last_error


def test_the_clients_take_an_injected_transport_and_fail_soft_through_it() -> None:
    """No server, no thread: the network is a function (what the simulator and tests use)."""
    seen: list[httpx.Request] = []

    def network(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.host == "down.test":
            raise httpx.ConnectError("connection refused")
        return httpx.Response(200, json={"choices": [{"message": {"content": "It works."}}]})

    transport = httpx.MockTransport(network)
    with Writer(Endpoint("http://model.test/v1", "writer", api_key="k"), transport=transport) as writer:
        assert writer.write("p", "s") == "It works."
    assert seen[0].url.path == "/v1/chat/completions" and seen[0].headers["authorization"] == "Bearer k"
    with Writer(Endpoint("http://down.test/v1", "writer"), transport=transport) as writer:
        assert writer.write("p", "s") is None
        assert writer.last_error is not None and "cannot reach" in writer.last_error
    with ModelClient(Endpoint("http://model.test/v1", "m", max_body_bytes=10), transport=transport) as client, \
            pytest.raises(ModelError, match="over the 10-byte limit"):
        client.post_json("/chat/completions", {})
