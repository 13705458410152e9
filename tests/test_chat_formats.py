"""The two chat formats read and edited without I/O (neverest/agents/chat_formats.py)."""

from __future__ import annotations

from fake_upstream import anthropic_json, anthropic_stream, openai_json, openai_stream

from neverest.agents import chat_formats as f
from neverest.agents.chats import session_of
from neverest.agents.detect import Detector

REPLY = "It turns out the lockfile pins an old version."


def test_the_persons_last_words_are_the_last_message_only_when_it_is_theirs() -> None:
    body = {"messages": [{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"},
                         {"role": "user", "content": [{"type": "text", "text": "second"},
                                                      {"type": "image_url", "image_url": {"url": "data:x"}}]}]}
    assert f.last_user_text(body) == "second" and f.first_user_text(body) == "first"
    tool_round = {"messages": [*body["messages"], {"role": "assistant", "tool_calls": []},
                               {"role": "tool", "tool_call_id": "1", "content": "out"}]}
    assert f.last_user_text(tool_round) == ""
    blocks = {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]}
    assert f.last_user_text(blocks) == "" and f.last_user_text({"messages": "nonsense"}) == ""


def test_a_system_text_goes_after_the_clients_own() -> None:
    body = {"model": "m", "messages": [{"role": "system", "content": "own"}, {"role": "user", "content": "hi"}]}
    out = f.with_system(f.OPENAI, body, "added")
    assert [m["content"] for m in out["messages"]] == ["own", "added", "hi"] and len(body["messages"]) == 2
    assert f.with_system(f.ANTHROPIC, {"messages": []}, "added")["system"] == "added"
    assert f.with_system(f.ANTHROPIC, {"system": "own"}, "added")["system"] == "own\n\nadded"
    listed = f.with_system(f.ANTHROPIC, {"system": [{"type": "text", "text": "own"}]}, "added")["system"]
    assert listed == [{"type": "text", "text": "own"}, {"type": "text", "text": "added"}]


def test_the_reply_is_read_from_a_json_answer() -> None:
    import json

    assert f.reply_text(f.OPENAI, json.loads(openai_json("m", REPLY))) == REPLY
    assert f.reply_text(f.ANTHROPIC, json.loads(anthropic_json("m", REPLY))) == REPLY
    tools = {"content": [{"type": "text", "text": "Let me look."}, {"type": "tool_use", "name": "Bash", "input": {}}]}
    assert f.reply_text(f.ANTHROPIC, tools) == "Let me look. [called Bash]"
    calls = {"choices": [{"message": {"content": None, "tool_calls": [{"id": "1", "function": {"name": "grep",
                                                                                             "arguments": "{}"}}]}}]}
    assert f.reply_text(f.OPENAI, calls) == "[called grep]"
    assert f.reply_text(f.OPENAI, {"choices": []}) == "" and f.reply_text(f.ANTHROPIC, None) == ""


def test_the_reply_is_assembled_from_a_stream_cut_anywhere() -> None:
    for fmt, chunks in ((f.OPENAI, openai_stream("m", REPLY)), (f.ANTHROPIC, anthropic_stream("m", REPLY))):
        whole = b"".join(chunks).replace(b"\n", b"\r\n") if fmt == f.OPENAI else b"".join(chunks)
        for size in (1, 7, 64, len(whole)):
            reader = f.StreamText(fmt)
            for at in range(0, len(whole), size):
                reader.feed(whole[at:at + size])
            assert reader.text() == REPLY, (fmt, size)


def test_a_stream_line_over_the_bound_is_skipped_not_held(monkeypatch: object) -> None:
    reader = f.StreamText(f.OPENAI)
    reader.feed(b"data: " + b"x" * (f.MAX_SSE_LINE_BYTES + 10))
    reader.feed(b"yyyy\n\n")
    assert len(reader._pending) == 0
    reader.feed(b"".join(openai_stream("m", "after it")))
    assert reader.text() == "after it"


def test_the_end_of_a_conversation_reads_as_session_turns_for_the_detector() -> None:
    """The proxy reads a request's tail (from the last agent message on) with the one message-array
    reader, ``chats.session_of``: an OpenAI correction and an Anthropic failed tool call are found."""
    openai = {"messages": [
        {"role": "user", "content": "build it"},
        {"role": "assistant", "content": "Running the build.",
         "tool_calls": [{"id": "c1", "function": {"name": "Bash", "arguments": '{"command": "npm run build"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "user", "content": "no, use pnpm, not npm"}]}
    tail = f.tail(openai)
    assert [m["role"] for m in tail] == ["assistant", "tool", "user"]
    detector = Detector("proxy", {"session": "s", "episode": True})
    events = [e for turn in session_of(tail, f.OPENAI) for e in detector.turn(turn)]
    assert [(e["kind"], e.get("said"), e.get("agent_did")) for e in events] == \
        [("correction", "no, use pnpm, not npm", "ran Bash: npm run build")]
    anthropic = {"messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                           "input": {"command": "pytest -q"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                                      "content": "ModuleNotFoundError: No module named 'httpx'\nexit code 1"}]}]}
    detector = Detector("proxy", {"session": "s", "episode": True})
    events = [e for turn in session_of(f.tail(anthropic), f.ANTHROPIC) for e in detector.turn(turn)]
    assert [e["kind"] for e in events] == ["error"] and "ModuleNotFoundError" in events[0]["happened"]
