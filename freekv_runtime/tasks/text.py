"""Natural English text available offline: the prose of Python's own reference (`pydoc_data.topics`).

`pydoc_data/topics.py` ships with every CPython. Its topics mix prose with grammar rules and code
examples; `reference_prose()` keeps only the prose paragraphs (not indented, not heading underlines),
each re-flowed onto one line, in topic order.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["reference_prose", "split_sentences", "PROSE_SOURCE"]

PROSE_SOURCE = "pydoc_data.topics (Python standard library), prose paragraphs"

_UNDERLINE = re.compile(r"^[*=\-~^]{3,}$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


@lru_cache(maxsize=1)
def reference_prose() -> str:
    """The prose paragraphs of the Python reference topics, separated by blank lines (~450 KB)."""
    from pydoc_data.topics import topics

    paragraphs: list[str] = []
    for key in sorted(topics):
        for block in re.split(r"\n\s*\n", topics[key]):
            lines = [line for line in block.splitlines() if line.strip()]
            if not lines or any(line.startswith(" ") for line in lines):
                continue  # code, grammar, tables and lists are indented
            if any(_UNDERLINE.match(line.strip()) for line in lines):
                continue  # headings
            paragraph = " ".join(line.strip() for line in lines)
            if len(paragraph.split()) >= 8 and not paragraph.endswith(":"):  # ":" introduces code
                paragraphs.append(paragraph)
    return "\n\n".join(paragraphs)


def split_sentences(text: str) -> list[str]:
    """Sentences of `text` (split after . ! ? followed by whitespace and a capital or quote)."""
    return [s.strip() for s in _SENTENCE_END.split(" ".join(text.split())) if s.strip()]
