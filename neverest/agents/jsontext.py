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

Comments (``//`` to the end of the line, ``/* ... */``) are read as white space, for the agents whose
files allow them (Gemini CLI strips them before parsing its ``settings.json``): ``loads`` reads such a file,
and the edits keep every comment where it is: a comment after the last member stays on its line (the new
member goes on the next one), and removing a member keeps the comments around it.

The text must be valid JSON, comments aside (``json.loads`` or ``loads`` it first): this reads structure,
it does not validate.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Final, Literal

_SPACE: Final = re.compile(r"[ \t\n\r]*")
_GAP: Final = re.compile(r"(?:[ \t\n\r]+|//[^\r\n]*|/\*.*?\*/)*", re.DOTALL)  # white space and comments
_COMMENT: Final = re.compile(r"//[^\r\n]*|/\*.*?\*/", re.DOTALL)
_STRING_OR_COMMENT: Final = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\r\n]*|/\*.*?\*/', re.DOTALL)
_LINE_COMMENTS: Final = re.compile(r"(?:[ \t]*(?://[^\r\n]*|/\*(?:(?!\*/)[^\n])*\*/))+")  # on the rest of a line
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


def without_comments(text: str) -> str:
    """``text`` with each comment outside strings blanked out (its line breaks kept, so that an error's
    line and column still point into the file)."""
    def blank(match: re.Match[str]) -> str:
        found = match.group()
        return found if found.startswith('"') else re.sub(r"[^\n]", " ", found)
    return _STRING_OR_COMMENT.sub(blank, text)


def has_comments(text: str) -> bool:
    return without_comments(text) != text


def loads(text: str) -> Any:
    """``json.loads`` of a text that may hold comments."""
    return json.loads(without_comments(text))


def parse(text: str) -> Node:
    """The spans of the JSON value ``text`` holds (leading and trailing white space allowed)."""
    node, end = _value(text, _skip(text, 0))
    if _skip(text, end) != len(text):
        raise ValueError(f"more than one JSON value (at {end})")
    return node


def _skip(text: str, pos: int) -> int:
    match = _GAP.match(text, pos)
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
            if "/" not in text[key.end():value.start]:  # (a comment there says nothing of the file's style)
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
    gap = between[between.index(",") + 1:]
    return gap if not gap.strip() else " "


def _newline(text: str) -> str:
    """The file's line break: CRLF when its first line ends so."""
    first = text.find("\n")
    return "\r\n" if first > 0 and text[first - 1] == "\r" else "\n"


def _render(value: Any, indent: str | None, unit: str, colon: str, gap: str, newline: str = "\n") -> str:
    """``value`` as the file writes it: nested one per line from ``indent`` on, or inline."""
    if indent is None:
        return json.dumps(value, ensure_ascii=False, separators=("," + gap, colon))
    return json.dumps(value, ensure_ascii=False, indent=unit, separators=(",", colon)).replace("\n", newline + indent)


def _child(text: str, root: Node, container: Node, key: str | None, value: Any) -> tuple[str, str | None]:
    """A new member (``key``) or item of ``container`` as text, and the indentation it starts on (None:
    inline, when its siblings are inline, or when the container is empty and the file is one line)."""
    unit, colon = _unit(text, root), _colon(text, root)
    if container.children():
        indent = _line_indent(text, container.children()[0][0]) if _multiline(text, container) else None
    else:
        indent = _line_indent(text, container.start) + unit if "\n" in text[root.start:root.end] else None
    rendered = _render(value, indent, unit, colon, _gap(text, container), _newline(text))
    if key is not None:
        rendered = json.dumps(key, ensure_ascii=False) + colon + rendered
    return rendered, indent


# -- edits -----------------------------------------------------------------------------------------------


def add(text: str, container: Node, value: Any, key: str | None = None, *, root: Node | None = None) -> str:
    """``text`` with ``value`` added after the last member (``key``) or item of ``container``."""
    root = root or parse(text)
    rendered, indent = _child(text, root, container, key, value)
    children = container.children()
    nl = _newline(text)
    if children:
        end = children[-1][1]
        trailing = _LINE_COMMENTS.match(text, end) if indent is not None else None
        if indent is not None and trailing is not None and text[trailing.end():trailing.end() + 1] in ("\n", "\r"):
            # A comment ends the last one's line: the comma goes before it, the new one on the next line.
            eol = trailing.end()
            return text[:end] + "," + text[end:eol] + nl + indent + rendered + text[eol:]
        return text[:end] + "," + (nl + indent if indent is not None else _gap(text, container)) + rendered \
            + text[end:]
    close = container.end - 1
    if _COMMENT.search(text, container.start + 1, close):
        # An empty container that holds comments: they stay, the new one goes after them.
        before = text[:close].rstrip(" \t\r\n")
        return before + (nl + indent if indent is not None else " ") + rendered + text[len(before):]
    inside = (nl + indent + rendered + nl + _line_indent(text, container.start)) if indent is not None \
        else rendered
    return text[:container.start + 1] + inside + text[close:]


def replace(text: str, container: Node, key: str, value: Any, *, root: Node | None = None) -> str:
    """``text`` with the value of member ``key`` of ``container`` replaced by ``value``, written as its
    siblings are (one per line at their indentation, or inline)."""
    root = root or parse(text)
    index = container.index(key)
    if index is None:
        raise KeyError(key)
    _, key_start, node = container.members[index]
    indent = _line_indent(text, key_start) if _multiline(text, container) else None
    rendered = _render(value, indent, _unit(text, root), _colon(text, root), _gap(text, container), _newline(text))
    return text[:node.start] + rendered + text[node.end:]


def remove(text: str, container: Node, index: int) -> str:
    """``text`` without the member or item ``index`` of ``container``, and its separator (the comments
    around it stay)."""
    children = container.children()
    start, end = children[index]
    if index > 0:
        before = children[index - 1][1]  # from the end of the one before: its comma and the space
        kept = _comments_of(text[before:start])
        last = list(_COMMENT.finditer(kept))[-1:]
        return text[:before] + (kept[:last[0].end()] if last else "") + text[end:]
    if len(children) > 1:
        after = children[1][0]  # to the start of the next one
        kept = _comments_of(text[end:after])
        first = _COMMENT.search(kept)
        return text[:start] + (kept[first.start():] if first else "") + text[after:]
    outside = text[container.start + 1:start] + text[end:container.end - 1]
    if _COMMENT.search(outside):  # the only one, beside comments: they stay
        before = len(text[:start].rstrip(" \t\r\n"))
        return text[:before] + text[end:]
    return text[:container.start + 1] + text[container.end - 1:]  # the only one: an empty container


def _comments_of(separator: str) -> str:
    """A separator between two members or items without its comma: its comments and the space around
    them, or "" when it holds no comment."""
    comma = _GAP.match(separator)
    at = comma.end() if comma else 0
    rest = separator[:at] + separator[at + 1:]
    return rest if _COMMENT.search(rest) else ""


def set_member(text: str, container: Node, key: str, value: Any) -> str:
    """``text`` with ``container[key]`` set to ``value``: replaced in place, or added last."""
    root = parse(text)
    if container.index(key) is not None:
        return replace(text, container, key, value, root=root)
    return add(text, container, value, key, root=root)
