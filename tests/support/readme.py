"""README.md and the docs site (docs/) as tests read them: the generated examples they show must be
what tfcluster writes, and every YAML block they show must be a spec (or a part of one) that
validates."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def _block_after(text: str, after: str) -> str:
    rest = text[text.index(after):]
    start = rest.index("```yaml\n") + len("```yaml\n")
    return rest[start:rest.index("\n```", start)] + "\n"


def docs_block(page: str, after: str) -> str:
    """The fenced YAML block that follows the text ``after`` in the docs page ``page`` (docs/PAGE)."""
    return _block_after((DOCS / page).read_text(), after)


def markdown_pages() -> list[Path]:
    """README.md and every page of the docs site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[A-Za-z0-9_-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                    re.M | re.S)


def fenced_blocks(path: Path, lang: str) -> list[tuple[int, str]]:
    """(line, text) of every fenced block of language ``lang`` in the Markdown file ``path`` (indented
    blocks, as inside a list item, are dedented)."""
    text = path.read_text()
    out = []
    for m in _FENCE.finditer(text):
        if m.group("lang") != lang:
            continue
        indent = m.group("indent")
        body = "".join(line[len(indent):] if line.startswith(indent) else line
                       for line in m.group("body").splitlines(keepends=True))
        out.append((text.count("\n", 0, m.start()) + 1, body))
    return out
