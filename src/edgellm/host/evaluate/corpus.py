"""The evaluation text as documents, split into a dev slice and a held-out slice by structure.

WikiText-2 test is 62 Wikipedia articles, each opened by a top-level heading line `` = Title = ``.
Articles are the documents: the decode path reads each one as one long context from its start.

**The held-out slice is the second half of the file: articles 31..61** (``HELDOUT_FROM``). Every
tuning decision — choosing a method's settings, ``auto``'s budgets, the bench's comparisons while
developing — looks at the dev slice (articles 0..30) or at the valid split; the held-out slice is
only read by a final report that asks for it by name (``--slice heldout``), and is reported next to
dev. Before this split existed every figure came from the first 2,048 test tokens (article 0 and
the start of article 1), so none of the held-out text was ever looked at.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgellm.common.paths import data_dir

TEST_FILE = "wikitext2-test.txt"
HELDOUT_FROM = 31  # first held-out article (of 62)
SLICES = ("dev", "heldout")
_HEADING = re.compile(r"^ = [^=].* = $")


def articles(text: str) -> list[str]:
    """The text cut before top-level headings (the first piece keeps any lines before its heading)."""
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if _HEADING.match(line)]
    if not starts:
        return [text]
    starts[0] = 0
    return ["\n".join(lines[a:b]) for a, b in zip(starts, [*starts[1:], len(lines)], strict=True)]


@dataclass(frozen=True)
class Slice:
    """Which articles a slice holds, how many tokens of them are scored and how long a document may be."""

    name: str = "dev"
    tokens: int = 8192  # tokens taken from the slice (the first of each document is never scored)
    doc_tokens: int = 2048  # longest document context; a longer article is cut here
    text_file: Path | None = None  # default: wikitext2-test in the data directory

    def __post_init__(self) -> None:
        if self.name not in SLICES:
            raise ValueError(f"slice must be one of {SLICES}, got {self.name!r}")
        if self.tokens < 2 or self.doc_tokens < 2:
            raise ValueError("slice tokens and doc_tokens must be at least 2")

    def path(self) -> Path:
        """The evaluation text file."""
        path = self.text_file or data_dir() / TEST_FILE
        if not path.is_file():
            raise FileNotFoundError(f"evaluation text {path} missing (set EDGELLM_DATA_DIR)")
        return path

    def article_range(self, n_articles: int) -> range:
        """Indices of this slice's articles."""
        cut = HELDOUT_FROM if n_articles > HELDOUT_FROM else n_articles // 2  # other texts: halves
        return range(0, cut) if self.name == "dev" else range(cut, n_articles)

    def documents(self, tokenize: Callable[[str], list[int]]) -> list[list[int]]:
        """Token ids of this slice's documents, in file order, until ``tokens`` are taken."""
        arts = articles(self.path().read_text(encoding="utf-8"))
        docs: list[list[int]] = []
        left = self.tokens
        for i in self.article_range(len(arts)):
            if left < 2:
                break
            # Why a character cap before tokenizing: ~4 characters per token here, so 8x the
            # token cap is ample and a 14k-word article is not tokenized whole.
            ids = tokenize(arts[i][: 8 * self.doc_tokens])[: min(self.doc_tokens, left)]
            if len(ids) >= 2:
                docs.append(ids)
                left -= len(ids)
        if left >= 2:
            raise ValueError(
                f"slice {self.name!r} yields only {self.tokens - left} tokens, need {self.tokens}"
            )
        return docs

    def describe(self) -> dict[str, object]:
        """JSON-ready description, for results and caches."""
        return {
            "slice": self.name,
            "tokens": self.tokens,
            "doc_tokens": self.doc_tokens,
            "text": str(self.text_file or TEST_FILE),
            "heldout_from_article": HELDOUT_FROM,
        }
