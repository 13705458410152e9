"""What identifies a machine or a person, removed from a lesson's text wherever it stands.

A lesson's sentence may leave the machine, so before it is stored, rendered, given to an agent or
signed it loses, wherever they stand (after a space, a quote, a parenthesis, ``=`` or ``:``, at the
start):

- URLs (credentials and all) and e-mail addresses;
- paths: absolute (``/home/ann/x``), home (``~/x``), relative with a folder (``./x``, ``../x``,
  ``src/app/page.tsx``), Windows (``C:\\Users\\ann``, ``\\\\server\\share``); a bare file name
  (``package.json``, ``next.config.mjs``) names nothing personal and is kept;
- the local user's name and host name, and a user name read from a path in the same text
  (``/home/ann/...`` or ``/Users/ann/...`` makes a later bare "ann" go too);
- UUIDs, long hex ids (git hashes, digests), IP addresses, and tokens (``sk-…``, ``ghp_…``,
  ``xox?-…``, ``AKIA…``, JWTs, any 24+ character run of letters and digits mixed);
- the values of ``NAME=value`` assignments (the variable is kept: it is what matters).

``meaningful`` says whether a scrubbed text still says something (a lesson that means nothing once
scrubbed stays personal), and ``leftovers`` is the gate for text that cannot be changed (a signed
lesson from another memory): what scrubbing would still remove.
"""

from __future__ import annotations

import os
import re
from functools import cache
from typing import Final

_URL: Final = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"'`<>)\]]+", re.I)
_EMAIL: Final = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_UUID: Final = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_TOKEN: Final = re.compile(
    r"\b(?:sk-[\w-]{16,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_\w{20,}|xox[abposr]-[\w-]{10,}|AKIA[0-9A-Z]{16}|"
    r"eyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]{8,}|glpat-[\w-]{16,})")
_SECRET: Final = re.compile(r"\b(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{24,}\b")
_HEXID: Final = re.compile(r"\b[0-9a-f]{12,}\b", re.I)
_IP: Final = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b")
_WINDOWS: Final = re.compile(r"(?:\b[A-Za-z]:[\\/]|\\\\)[^\s\"'`<>|]*")
# A path: something that holds a slash between name characters, or starts with / ~/ ./ ../, wherever it
# stands; "and/or", "I/O", "TCP/IP" (short words on both sides, no dot) are not paths.
_PATH: Final = re.compile(
    r"(?<![\w/.~()-])(?:~|\.{1,2})?/?(?:[\w.@+()\[\]-]+/)+[\w.@+()\[\]-]*|"
    r"(?<![\w/.~-])(?:~|\.{1,2})/[\w.@+()-]*|(?<![\w:/.~-])/[\w.@+()-]+")
_SHORT_PAIR: Final = re.compile(r"^[A-Za-z]{1,4}/[A-Za-z]{1,4}$")
# A host name: dotted labels ending in a top-level domain people use for machines and sites (a file name
# such as next.config.mjs or package.json ends in an extension, not in one of these).
_HOST: Final = re.compile(
    r"\b(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+(?:com|net|org|io|dev|app|us|uk|de|fr|nl|eu|ca|au|in|jp|cn|"
    r"ru|br|ch|se|no|it|es|pl|local|localdomain|internal|lan|home|corp|intranet|cloud|ai|co|me|info|biz|xyz|tech|"
    r"site|online|gov|edu)\b(?![\w-])", re.I)
_HOME_USER: Final = re.compile(r"(?:/home/|/Users/|\\Users\\|/var/folders/)([\w.-]+)", re.I)
_ASSIGN: Final = re.compile(r"\b([A-Z][A-Z0-9_]{1,})=\S+")
_SPACES: Final = re.compile(r"\s+")
_PLACEHOLDERS: Final = ("a URL", "an address", "a path", "an id", "a token", "a host", "a user", "an IP")
_STOP: Final = frozenset(
    "a an the and or of to in on at by for with from is are was were be it this that fails failed not no "
    "url address path id token host user ip when then".split())


# Account and host names that are ordinary words of the trade: removing them from every sentence would cost
# the sentence ("npm run dev"), and they identify nobody.
_COMMON_ACCOUNTS: Final = frozenset(
    "root localhost user home dev test app admin build runner ubuntu debian node docker developer guest vagrant "
    "ec2-user coder codespace vscode www-data nobody ci server host vm sandbox workspace container".split())


@cache
def _local_names() -> tuple[str, ...]:
    """This machine's user and host names, long enough not to be ordinary words."""
    # os only (no getpass, no socket): the hook scrubs every lesson it shows, on every tool call.
    names: set[str] = {os.environ.get(var, "") for var in ("USER", "LOGNAME", "USERNAME")}
    names.add(os.path.basename(os.path.expanduser("~")))
    host = os.uname().nodename if hasattr(os, "uname") else os.environ.get("COMPUTERNAME", "")
    names.update({host, host.split(".")[0]})
    return tuple(sorted(n for n in names if len(n) >= 3 and n.lower() not in _COMMON_ACCOUNTS))


def _path(match: re.Match[str]) -> str:
    text = match.group(0)
    if _SHORT_PAIR.match(text) or text in ("/", "//"):
        return text
    # A path inside parentheses: its closing one is the sentence's, not the path's.
    tail = ""
    while text.endswith(")") and text.count(")") > text.count("("):
        text, tail = text[:-1], ")" + tail
    return "a path" + tail


def scrub(text: str) -> str:
    """``text`` without what identifies a machine or a person; the words are kept."""
    users = {m.group(1) for m in _HOME_USER.finditer(text)}
    text = _URL.sub("a URL", text)
    text = _EMAIL.sub("an address", text)
    text = _UUID.sub("an id", text)
    text = _TOKEN.sub("a token", text)
    text = _ASSIGN.sub(r"\1", text)  # "LANG=C" → "LANG": the variable matters, its value may not
    text = _WINDOWS.sub("a path", text)
    text = _PATH.sub(_path, text)
    text = _IP.sub("an IP", text)
    text = _HOST.sub("a host", text)
    text = _HEXID.sub("an id", text)
    text = _SECRET.sub("a token", text)
    for name in sorted(users | set(_local_names()), key=len, reverse=True):
        if len(name) >= 3:
            text = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", "a user", text, flags=re.I)
    text = re.sub(r"([\"'`])(a (?:path|URL|token|user)|an (?:address|id|IP))\1", r"\2", text)
    return _SPACES.sub(" ", text).strip(" .;:,")


def leftovers(text: str) -> str | None:
    """What scrubbing would still remove from ``text`` (a reason), or None when it is clean."""
    for name, pattern in (("a URL", _URL), ("an e-mail address", _EMAIL), ("a token", _TOKEN), ("a host", _HOST),
                          ("a path", _WINDOWS), ("an IP address", _IP), ("an id", _UUID)):
        found = pattern.search(text)
        if found:
            return f"holds {name}: {found.group(0)[:40]!r}"
    for found in _PATH.finditer(text):
        if _path(found).startswith("a path"):
            return f"holds a path: {found.group(0)[:40]!r}"
    return None


def meaningful(text: str) -> bool:
    """Whether ``text`` still says something once scrubbed: three words that are neither placeholders
    nor filler."""
    rest = scrub(text)
    for placeholder in _PLACEHOLDERS:
        rest = rest.replace(placeholder, " ")
    words = [w for w in re.findall(r"[A-Za-z][\w'+-]*", rest) if w.lower() not in _STOP]
    return len(words) >= 3
