"""Editing JSON text in place (``neverest.agents.jsontext``), and setup's JSON edits built on it: what is
added is written as its siblings are, what is removed takes its separator, and nothing else moves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neverest.agents import jsontext
from neverest.agents.setup import hooks_added, hooks_removed, server_added, server_removed

PATH = Path("settings.json")
HOOK = "/opt/nv/bin/neverest-hook"


@pytest.mark.parametrize("text, expected", [
    ('{"a": 1}', '{"a": 1, "b": [2]}'),
    ('{"a":1,"c":3}', '{"a":1,"c":3,"b":[2]}'),
    ("{}", '{"b": [2]}'),
    ('{\n  "a": 1\n}\n', '{\n  "a": 1,\n  "b": [\n    2\n  ]\n}\n'),
    ('{\n\t"a": {}\n}', '{\n\t"a": {},\n\t"b": [\n\t\t2\n\t]\n}'),
])
def test_a_member_is_added_as_its_siblings_are_written(text: str, expected: str) -> None:
    root = jsontext.parse(text)
    added = jsontext.add(text, root, [2], "b")
    assert added == expected and json.loads(added) == json.loads(text) | {"b": [2]}
    new_root = jsontext.parse(added)
    index = new_root.index("b")
    assert index is not None and jsontext.remove(added, new_root, index) == text  # and taken out again


def test_an_empty_container_in_a_multiline_file_gets_one_per_line_and_the_first_item_goes_cleanly() -> None:
    text = '{\n    "a": [],\n    "b": [1, 2]\n}'
    root = jsontext.parse(text)
    a, b = root.member("a"), root.member("b")
    assert a is not None and b is not None
    assert jsontext.add(text, a, {"x": 1}) == '{\n    "a": [\n        {\n            "x": 1\n        }\n    ],\n' \
        '    "b": [1, 2]\n}'
    assert jsontext.remove(text, b, 0) == '{\n    "a": [],\n    "b": [2]\n}'
    assert jsontext.set_member(text, root, "a", "z") == '{\n    "a": "z",\n    "b": [1, 2]\n}'


def test_setup_edits_round_trip_on_files_of_every_shape() -> None:
    server = {"type": "stdio", "command": "/opt/nv/bin/neverestctl", "args": ["mcp"], "env": {}}
    for text in ('{"model": "opus"}', '{\n  "model": "opus"\n}\n', '\ufeff{"hooks": {"Stop": [1]}}\n',
                 '{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "keep.sh"}]}]}, "z": 1.50}',
                 '{"mcpServers": {"gh": {"command": "gh"}}, "n": 1}', '{"mcpServers": {\n "gh": {}\n}}'):
        content = text.encode()
        added = hooks_added(content, PATH, HOOK)
        assert added is not None and added != content
        assert all(HOOK in json.dumps(json.loads(added.decode().lstrip("\ufeff"))["hooks"][e])
                   for e in ("SessionStart", "Stop"))
        assert hooks_added(added, PATH, HOOK) == added  # already wired
        assert hooks_removed(added, PATH) == content, text  # byte for byte
        with_server = server_added(content, PATH, server)
        assert with_server is not None and json.loads(with_server.decode().lstrip("\ufeff"))["mcpServers"]["neverest"] \
            == server
        if "mcpServers" in text:
            assert server_removed(with_server, PATH) == content, text


def test_what_our_removal_empties_goes_with_it() -> None:
    # An event, and the "hooks" object, left empty by taking ours out go (setup may have made them).
    added = hooks_added(b'{"hooks": {}, "a": 1}', PATH, HOOK)
    assert added is not None and hooks_removed(added, PATH) == b'{"a": 1}'


def test_our_hook_beside_the_persons_in_one_group_goes_and_theirs_stays() -> None:
    theirs = {"type": "command", "command": "~/bin/guard.sh"}
    ours = {"type": "command", "command": HOOK}
    text = json.dumps({"hooks": {"Stop": [{"hooks": [theirs, ours]}], "Old": [{"hooks": [ours]}]}}, indent=4)
    removed = hooks_removed(text.encode(), PATH)
    assert removed is not None
    assert json.loads(removed) == {"hooks": {"Stop": [{"hooks": [theirs]}]}}
    assert removed.decode() == json.dumps({"hooks": {"Stop": [{"hooks": [theirs]}]}}, indent=4)


def test_a_file_the_text_edit_cannot_follow_is_written_anew() -> None:
    twice = b'{"hooks": {"Stop": 1}, "hooks": {}}'  # json.loads keeps the last "hooks"
    added = hooks_added(twice, PATH, HOOK)
    assert added is not None and set(json.loads(added)["hooks"]) >= {"SessionStart", "Stop"}


# Comments, as Gemini CLI's settings.json allows them (it strips them before JSON.parse: google-gemini/gemini-cli,
# packages/cli/src/config/settings.ts): read as white space, and every one kept where it was.
@pytest.mark.parametrize("text", [
    '{\n  "a": 1 // note\n}\n',
    '{\n  "a": 1, // first\n  "b": 2 /* two */\n}',
    '{\n  "mcpServers": {\n    // add servers here\n  }\n}',
    '{"mcpServers": {/* none */}}',
    '{\r\n  "a": 1 // note\r\n}\r\n',
    '{\r\n  "mcpServers": {}\r\n}\r\n',
    '// top\n{\n  "x": "http://a//b", /* c, d */\n  "y": [1, /* mid */ 2]\n}',
])
def test_comments_are_kept_where_they_are_and_a_member_added_then_removed_gives_the_text_back(text: str) -> None:
    root = jsontext.parse(text)
    node = root.member("mcpServers") or root
    added = jsontext.add(text, node, {"command": "x", "args": ["a"]}, "neverest", root=root)
    assert jsontext._COMMENT.findall(added) == jsontext._COMMENT.findall(text)  # every comment, in its order
    data = jsontext.loads(text)
    expected = data | ({"mcpServers": {"neverest": {"command": "x", "args": ["a"]}}} if "mcpServers" in data
                       else {"neverest": {"command": "x", "args": ["a"]}})
    assert jsontext.loads(added) == expected
    if "\r\n" in text:
        assert "\n" not in added.replace("\r\n", "")  # the file's own line breaks
    new_root = jsontext.parse(added)
    new_node = new_root.member("mcpServers") or new_root
    index = new_node.index("neverest")
    assert index is not None and jsontext.remove(added, new_node, index) == text


def test_a_comment_after_the_last_member_stays_on_its_line() -> None:
    text = '{\n  "a": 1 // the answer\n}'
    root = jsontext.parse(text)
    assert jsontext.add(text, root, 2, "b", root=root) == '{\n  "a": 1, // the answer\n  "b": 2\n}'


def test_removing_a_member_keeps_the_comments_the_person_wrote_around_it() -> None:
    text = '{\n  "neverest": {}, // mine\n  "b": 2\n}'
    root = jsontext.parse(text)
    assert jsontext.remove(text, root, 0) == '{\n  // mine\n  "b": 2\n}'
    text = '{\n  "a": 1, /* keep */\n  "neverest": {}\n}'
    root = jsontext.parse(text)
    assert jsontext.remove(text, root, 1) == '{\n  "a": 1 /* keep */\n}'


def test_without_comments_leaves_strings_alone_and_keeps_lines() -> None:
    text = '{"url": "http://x//y", "b": "/* no */"} // yes\n/* two\nlines */'
    stripped = jsontext.without_comments(text)
    assert json.loads(stripped) == {"url": "http://x//y", "b": "/* no */"}
    assert stripped.count("\n") == text.count("\n") and len(stripped) == len(text)
    assert jsontext.has_comments(text) and not jsontext.has_comments('{"a": "//"}')
