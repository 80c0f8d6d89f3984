"""README.md as tests read it: the generated examples it shows must be what tfcluster writes."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_block(after: str) -> str:
    """The fenced YAML block that follows the text ``after`` in README.md."""
    text = README.read_text()
    rest = text[text.index(after):]
    start = rest.index("```yaml\n") + len("```yaml\n")
    return rest[start:rest.index("\n```", start)] + "\n"
