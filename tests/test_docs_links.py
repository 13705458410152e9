"""The documentation holds together: every relative link in the Markdown resolves, and the README stays a guide.

A link is checked when it is relative (not ``http:``, ``https:``, ``mailto:``): its file must exist, relative to
the file that links to it, and an anchor (``file.md#section`` or ``#section``) must name a heading of that Markdown
file as GitHub spells it.  Links inside code blocks and inline code are not links.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 400
DOCS = sorted([ROOT / "README.md", ROOT / "PROTOCOL.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")])

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code (whose brackets are not links)."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading keeps its words
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    return LINK.findall(prose(path.read_text(encoding="utf-8")))


def broken(path: Path) -> list[str]:
    out = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not dest.exists():
            out.append(f"{target}: no such file")
            continue
        if anchor and dest.suffix == ".md" and unquote(anchor).lower() not in anchors(dest):
            out.append(f"{target}: no heading #{anchor} in {dest.name}")
    return out


@pytest.mark.parametrize("path", DOCS, ids=[p.relative_to(ROOT).as_posix() for p in DOCS])
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken(path) == []


def test_the_readme_is_a_guide_of_at_most_400_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES


def test_the_checker_finds_what_is_broken(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title\n\n## Where to add `things`\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md) [ok](a.md#where-to-add-things) [ok](#local) [web](https://example.org/x)\n"
                    "`[not a link](nowhere.md)`\n```\n[not a link](nowhere.md)\n```\n"
                    "## Local\n[gone](missing.md) [no anchor](a.md#nothing) ![img](pic.png)\n", encoding="utf-8")
    assert broken(page) == ["missing.md: no such file", "a.md#nothing: no heading #nothing in a.md",
                            "pic.png: no such file"]


def test_github_anchors() -> None:
    assert slug("Your memory: `init`, `doctor`, `forget`, `export`") == "your-memory-init-doctor-forget-export"
    assert slug("Lessons in the agent's own memory (MEMORY.md)") == "lessons-in-the-agents-own-memory-memorymd"
    assert slug("The commons: do true lessons become common, and false ones never?") == \
        "the-commons-do-true-lessons-become-common-and-false-ones-never"
    assert slug("Dissemination: one lesson, N agents, against ideal push-pull") == \
        "dissemination-one-lesson-n-agents-against-ideal-push-pull"
