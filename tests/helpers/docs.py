"""The user documentation as tests see it: README.md and docs/*.md, their links and their code blocks."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>\w*)[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
_LINK = re.compile(r"(?<!!)\[[^\]]+\]\((?P<target>[^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} (?P<title>.+?)\s*$", re.M)


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language and its code (dedented, as it runs)."""

    page: str
    index: int
    language: str
    code: str

    @property
    def name(self) -> str:
        """`page#language-index`: how a test names the block it runs (index counts that language only)."""
        return f"{self.page}#{self.language}-{self.index}"


def page_name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def blocks(path: Path, language: str) -> list[Block]:
    """The page's fenced blocks of one language, in order; a block indented in a list item is dedented."""
    text = path.read_text()
    found = [m for m in _FENCE.finditer(text) if m.group("lang") == language]
    return [Block(page_name(path), i, language, textwrap.dedent(m.group("body"))) for i, m in enumerate(found)]


def block(page: str, language: str, index: int = 0) -> Block:
    return blocks(ROOT / page, language)[index]


def links(path: Path) -> list[str]:
    """Every relative link target of the page (web links are left out), outside code blocks."""
    text = _FENCE.sub("", path.read_text())
    return [m.group("target") for m in _LINK.finditer(text) if "://" not in m.group("target")]


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces as dashes."""
    text = _FENCE.sub("", path.read_text())
    return {re.sub(r"[^\w\- ]", "", m.group("title").lower()).replace(" ", "-") for m in _HEADING.finditer(text)}
