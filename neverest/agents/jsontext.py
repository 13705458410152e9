"""A JSON file's text edited in place: one value set, added or removed, every other byte kept.

``setup`` adds its hooks and MCP server to files a person wrote by hand (``settings.json``) or
an agent keeps (``.claude.json``).  Loading and dumping them again would re-indent the whole file,
reorder nothing but rewrite escapes, numbers and spacing: the person's file would no longer look
like theirs.  Here the text is read into spans (where each value, object member and array item
starts and ends) and each edit splices text at one place:

- an added member or item goes after the last one of its object or array, written the way its
  siblings are: on its own line at their indentation (and nested with the file's indentation unit)
  when they are one per line, on the same line with their spacing when they are inline;
- a removed member or item takes its separating comma and the space before it (after it, for the
  first one), so that removing what was added gives back the text as it was, byte for byte.

The text must be valid JSON (``json.loads`` it first): this reads structure, it does not validate.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Final, Literal

_SPACE: Final = re.compile(r"[ \t\n\r]*")
_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_SCALAR: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
DEFAULT_UNIT: Final = "  "


@dataclass
class Node:
    """A value's span ``[start, end)``; an object's members as (key, where the key starts, value)."""

    kind: Literal["object", "array", "scalar"]
    start: int
    end: int
    members: list[tuple[str, int, Node]] = field(default_factory=list)
    items: list[Node] = field(default_factory=list)

    def children(self) -> list[tuple[int, int]]:
        """Each member's or item's span, from its key (or itself) to the end of its value."""
        if self.kind == "object":
            return [(key_start, value.end) for _, key_start, value in self.members]
        return [(item.start, item.end) for item in self.items]

    def member(self, key: str) -> Node | None:
        """The value of ``key`` (the last one, as ``json.loads`` keeps the last of a repeated key)."""
        return next((value for name, _, value in reversed(self.members) if name == key), None)

    def index(self, key: str) -> int | None:
        return next((i for i in range(len(self.members) - 1, -1, -1) if self.members[i][0] == key), None)


def parse(text: str) -> Node:
    """The spans of the JSON value ``text`` holds (leading and trailing white space allowed)."""
    node, end = _value(text, _skip(text, 0))
    if _skip(text, end) != len(text):
        raise ValueError(f"more than one JSON value (at {end})")
    return node


def _skip(text: str, pos: int) -> int:
    match = _SPACE.match(text, pos)
    return match.end() if match else pos


def _value(text: str, pos: int) -> tuple[Node, int]:
    if pos >= len(text):
        raise ValueError("the JSON text ends early")
    char = text[pos]
    if char == "{":
        node = Node("object", pos, pos)
        at = _skip(text, pos + 1)
        if text[at:at + 1] != "}":
            while True:
                key = _STRING.match(text, at)
                if key is None:
                    raise ValueError(f"an object key is expected at {at}")
                colon = _skip(text, key.end())
                if text[colon:colon + 1] != ":":
                    raise ValueError(f"':' is expected at {colon}")
                value, after = _value(text, _skip(text, colon + 1))
                node.members.append((json.loads(key.group()), key.start(), value))
                at = _skip(text, after)
                if text[at:at + 1] == ",":
                    at = _skip(text, at + 1)
                    continue
                break
        if text[at:at + 1] != "}":
            raise ValueError(f"'}}' is expected at {at}")
        node.end = at + 1
        return node, node.end
    if char == "[":
        node = Node("array", pos, pos)
        at = _skip(text, pos + 1)
        if text[at:at + 1] != "]":
            while True:
                item, after = _value(text, at)
                node.items.append(item)
                at = _skip(text, after)
                if text[at:at + 1] == ",":
                    at = _skip(text, at + 1)
                    continue
                break
        if text[at:at + 1] != "]":
            raise ValueError(f"']' is expected at {at}")
        node.end = at + 1
        return node, node.end
    match = _STRING.match(text, pos) if char == '"' else _SCALAR.match(text, pos)
    if match is None:
        raise ValueError(f"a JSON value is expected at {pos}")
    return Node("scalar", pos, match.end()), match.end()


# -- how the file is written -----------------------------------------------------------------------


def _line_indent(text: str, pos: int) -> str:
    """The white space that starts the line ``pos`` is on."""
    start = text.rfind("\n", 0, pos) + 1
    match = _SPACE.match(text, start)
    return text[start:match.end() if match else start].replace("\n", "").replace("\r", "")


def _multiline(text: str, node: Node) -> bool:
    """Whether ``node``'s members or items are one per line (its first one starts a line)."""
    children = node.children()
    return bool(children) and "\n" in text[node.start + 1:children[0][0]]


def _unit(text: str, root: Node) -> str:
    """The file's indentation unit: how much deeper than its container the first one-per-line member
    or item of the file is indented (two spaces when nothing in the file says)."""
    stack = [root]
    while stack:
        node = stack.pop(0)
        if _multiline(text, node):
            outer, inner = _line_indent(text, node.start), _line_indent(text, node.children()[0][0])
            if inner.startswith(outer) and len(inner) > len(outer):
                return inner[len(outer):]
        stack += [value for _, _, value in node.members] + node.items
    return DEFAULT_UNIT


def _colon(text: str, root: Node) -> str:
    """How the file separates a key from its value (``": "`` when it has no member to say)."""
    stack = [root]
    while stack:
        node = stack.pop(0)
        for _, key_start, value in node.members:
            key = _STRING.match(text, key_start)
            assert key is not None
            return text[key.end():value.start]
        stack += [value for _, _, value in node.members] + node.items
    return ": "


def _gap(text: str, node: Node) -> str:
    """The space after the commas between ``node``'s inline members or items (one space when it has
    fewer than two)."""
    children = node.children()
    if len(children) < 2:
        return " "
    between = text[children[0][1]:children[1][0]]
    return between[between.index(",") + 1:]


def _render(value: Any, indent: str | None, unit: str, colon: str, gap: str) -> str:
    """``value`` as the file writes it: nested one per line from ``indent`` on, or inline."""
    if indent is None:
        return json.dumps(value, ensure_ascii=False, separators=("," + gap, colon))
    return json.dumps(value, ensure_ascii=False, indent=unit, separators=(",", colon)).replace("\n", "\n" + indent)


def _child(text: str, root: Node, container: Node, key: str | None, value: Any) -> tuple[str, str | None]:
    """A new member (``key``) or item of ``container`` as text, and the indentation it starts on (None:
    inline, when its siblings are inline, or when the container is empty and the file is one line)."""
    unit, colon = _unit(text, root), _colon(text, root)
    if container.children():
        indent = _line_indent(text, container.children()[0][0]) if _multiline(text, container) else None
    else:
        indent = _line_indent(text, container.start) + unit if "\n" in text[root.start:root.end] else None
    rendered = _render(value, indent, unit, colon, _gap(text, container))
    if key is not None:
        rendered = json.dumps(key, ensure_ascii=False) + colon + rendered
    return rendered, indent


# -- edits -----------------------------------------------------------------------------------------------


def add(text: str, container: Node, value: Any, key: str | None = None, *, root: Node | None = None) -> str:
    """``text`` with ``value`` added after the last member (``key``) or item of ``container``."""
    root = root or parse(text)
    rendered, indent = _child(text, root, container, key, value)
    children = container.children()
    if children:
        end = children[-1][1]
        return text[:end] + "," + ("\n" + indent if indent is not None else _gap(text, container)) + rendered \
            + text[end:]
    inside = ("\n" + indent + rendered + "\n" + _line_indent(text, container.start)) if indent is not None \
        else rendered
    return text[:container.start + 1] + inside + text[container.end - 1:]


def replace(text: str, container: Node, key: str, value: Any, *, root: Node | None = None) -> str:
    """``text`` with the value of member ``key`` of ``container`` replaced by ``value``, written as its
    siblings are (one per line at their indentation, or inline)."""
    root = root or parse(text)
    index = container.index(key)
    if index is None:
        raise KeyError(key)
    _, key_start, node = container.members[index]
    indent = _line_indent(text, key_start) if _multiline(text, container) else None
    rendered = _render(value, indent, _unit(text, root), _colon(text, root), _gap(text, container))
    return text[:node.start] + rendered + text[node.end:]


def remove(text: str, container: Node, index: int) -> str:
    """``text`` without the member or item ``index`` of ``container``, and its separator."""
    children = container.children()
    start, end = children[index]
    if index > 0:
        start = children[index - 1][1]  # from the end of the one before: its comma and the space
    elif len(children) > 1:
        end = children[1][0]  # to the start of the next one
    else:
        start, end = container.start + 1, container.end - 1  # the only one: an empty container
    return text[:start] + text[end:]


def set_member(text: str, container: Node, key: str, value: Any) -> str:
    """``text`` with ``container[key]`` set to ``value``: replaced in place, or added last."""
    root = parse(text)
    if container.index(key) is not None:
        return replace(text, container, key, value, root=root)
    return add(text, container, value, key, root=root)
