"""The issue-31 speculation prompt kinds (bench/prompts/spec_kinds.jsonl), with tune and held-out halves.

Text kinds (copy, edit, quotes, summary) quote passages of the *later* articles of WikiText-2 test
(articles 32 on; no draft policy was tuned on them: the issue-17 sets used the valid split). The
code kind edits functions of the project's own tests; open asks questions that are not in the
issue-17 open set. Halves are split by source — article, test file, question — never inside one,
so a held-out passage never shares an article with a tuning one.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.make_spec_prompts import detokenize

PER_HALF = 10
FIRST_ARTICLE = 32  # of the 64 in wikitext2-test: the later half
WORDS = (40, 90)  # a passage: whole <unk>-free sentences, within this many words
PER_ARTICLE = 8  # at most: one long article would otherwise be a third of a half
TESTS = Path(__file__).resolve().parent.parent / "tests"
TEXT_KINDS = ("copy", "edit", "quotes", "summary")
KINDS = (*TEXT_KINDS, "code", "open")

COPY = (
    "Repeat the following passage word for word.",
    "Copy the following text exactly, without changing anything.",
    "Reproduce this passage verbatim.",
)
REFORMAT = (
    "Rewrite the following passage with each sentence on its own line, changing no words.",
    "Rewrite the following passage as a bulleted list, one sentence per bullet, keeping the wording.",
)
RENAME = 'Rewrite the following passage, replacing "{old}" with "{new}" everywhere and changing nothing else.'
NEW_NAMES = ("Norland", "Castavia", "Bellmoor", "Quillan", "Dravenport", "Elsworth", "Marrowick", "Tavish")
QUOTES = (
    "Quote the first and the last sentence of the following passage exactly.",
    'Extract every sentence of the following passage that mentions "{entity}", quoted word for word.',
    "Pick the two most important sentences of the following passage and quote them exactly.",
)
SUMMARY = (
    "Summarise the following passage in two sentences, quoting its key phrases in quotation marks.",
    "Write a short summary of the following passage that quotes at least two of its sentences exactly.",
    "Summarise the following passage, quoting its key sentences.",
)
CODE = (
    "Rename the function `{name}` to `{new}` in this code and return the whole code.",
    "Rename the variable `{var}` to `{var}_value` everywhere in this code and return the whole code.",
    "Add a short comment above every line that starts with `assert` and return the whole code.",
    "Add type hints where they are missing in this code and return the whole code.",
)
OPEN = (
    "What is a good way to spend a rainy afternoon?",
    "How do bees make honey?",
    "What should I consider when adopting a dog?",
    "Why do we dream?",
    "Give me three ideas for a quick vegetarian dinner.",
    "How does a refrigerator keep food cold?",
    "What are some ways to reduce stress at work?",
    "Explain what inflation is in simple terms.",
    "Write a short poem about the sea.",
    "What is the best way to memorise a speech?",
    "Why do some birds migrate?",
    "How can I make my houseplants grow better?",
    "What is the difference between a virus and a bacterium?",
    "Suggest a theme for a school science fair project.",
    "How do volcanoes form?",
    "What are some tips for a first job interview?",
    "Tell me an interesting fact about the Moon.",
    "How do I keep a conversation going with someone new?",
    "What makes bread rise?",
    "Describe a perfect summer day in three sentences.",
)
MONTHS = {"January", "February", "March", "April", "June", "July", "August", "September", "October"}
MONTHS |= {"November", "December", "However", "During", "After", "Before", "Although", "While"}


@dataclass(frozen=True)
class Passage:
    """One <unk>-free run of sentences and where it came from."""

    text: str
    article: int
    title: str


def first_run(paragraph: str) -> str:
    """The first run of whole <unk>-free sentences of `paragraph` within WORDS, or ""."""
    run: list[str] = []
    for sentence in [*re.split(r"(?<=\.) ", detokenize(paragraph)), "<unk>"]:
        words = len(" ".join([*run, sentence]).split())
        if "<unk>" not in sentence and words <= WORDS[1]:
            run.append(sentence)
            continue
        if len(" ".join(run).split()) >= WORDS[0]:
            return " ".join(run)
        run = []
    return ""


def passages(path: Path) -> list[Passage]:
    """One passage per body paragraph of the articles from FIRST_ARTICLE on, PER_ARTICLE at most."""
    out: list[Passage] = []
    article, title = -1, ""
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if re.fullmatch(r"= [^=].* =", line):
            article, title = article + 1, detokenize(line.strip("= "))
            continue
        if article < FIRST_ARTICLE or not line or line.startswith("="):
            continue
        text = first_run(line)
        if text and sum(p.article == article for p in out) < PER_ARTICLE:
            out.append(Passage(text, article, title.replace("<unk>", "?")))
    return out


def halves(sources: list[int]) -> list[str]:
    """tune/heldout per item, whole sources at a time, each to the half with fewer items so far."""
    count = Counter(sources)
    given: dict[int, str] = {}
    size = {"tune": 0, "heldout": 0}
    for source in dict.fromkeys(sources):
        half = "tune" if size["tune"] <= size["heldout"] else "heldout"
        given[source] = half
        size[half] += count[source]
    return [given[s] for s in sources]


def entity(text: str) -> str:
    """The passage's most frequent capitalised word that does not start a sentence ("" if none)."""
    words = re.findall(r"(?<![.!?] )(?<!^)\b[A-Z][a-z]{3,}\b", text)
    common = Counter(w for w in words if w not in MONTHS).most_common(1)
    return common[0][0] if common else ""


def text_task(kind: str, i: int, text: str) -> str:
    """The i-th instruction of a text kind for this passage."""
    name = entity(text)
    if kind == "copy":
        return COPY[i % len(COPY)]
    if kind == "edit":
        if i % 2 == 0 and name:
            return RENAME.format(old=name, new=NEW_NAMES[i // 2 % len(NEW_NAMES)])
        return REFORMAT[i // 2 % len(REFORMAT)]
    if kind == "quotes":
        template = QUOTES[i % len(QUOTES)]
        return template.format(entity=name) if name or "{entity}" not in template else QUOTES[0]
    return SUMMARY[i % len(SUMMARY)]


def text_rows(path: Path) -> list[dict[str, str]]:
    """PER_HALF prompts per text kind and half, passages dealt round-robin over the kinds."""
    found = passages(path)
    rows: list[dict[str, str]] = []
    for half in ("tune", "heldout"):
        mine = [p for p, h in zip(found, halves([p.article for p in found]), strict=True) if h == half]
        if len(mine) < PER_HALF * len(TEXT_KINDS):
            raise SystemExit(f"{len(mine)} {half} passages in {path}, need {PER_HALF * len(TEXT_KINDS)}")
        for i, p in enumerate(mine[: PER_HALF * len(TEXT_KINDS)]):
            kind, n = TEXT_KINDS[i % len(TEXT_KINDS)], i // len(TEXT_KINDS)
            prompt = f"{text_task(kind, n, p.text)}\n\n{p.text}"
            source = f"wikitext2-test article {p.article}: {p.title}"
            rows.append({"kind": kind, "half": half, "prompt": prompt, "source": source})
    return rows


def functions(root: Path = TESTS) -> list[tuple[Path, ast.FunctionDef, str]]:
    """Top-level functions of 6–18 lines (≤ 800 characters) in the project's tests, one per file."""
    out = []
    for path in sorted(root.rglob("test_*.py")):
        source = path.read_text(encoding="utf-8")
        for node in ast.parse(source).body:
            code = ast.get_source_segment(source, node) if isinstance(node, ast.FunctionDef) else None
            if (
                code
                and 6 <= code.count("\n") + 1 <= 18
                and len(code) <= 800
                and isinstance(node, ast.FunctionDef)
            ):
                out.append((path, node, code))
                break
    return out


def code_task(i: int, node: ast.FunctionDef) -> str:
    """The i-th code instruction for this function (a variable rename needs an assigned name)."""
    assigned = [
        t.id
        for n in ast.walk(node)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    ]
    template = CODE[i % len(CODE)]
    if "{var}" in template and not assigned:
        template = CODE[0]
    new = node.name.replace("test_", "check_", 1) if node.name.startswith("test_") else f"{node.name}_v2"
    return template.format(name=node.name, new=new, var=assigned[0] if assigned else "")


def code_rows(root: Path = TESTS) -> list[dict[str, str]]:
    """PER_HALF code prompts per half, from test files spread evenly over the tests tree."""
    found = functions(root)
    step = max(1, len(found) // (2 * PER_HALF))
    picked = found[::step][: 2 * PER_HALF]
    rows = []
    for i, (path, node, code) in enumerate(picked):
        prompt = f"{code_task(i // 2, node)}\n\n```python\n{code}\n```"
        half = ("tune", "heldout")[i % 2]
        rows.append(
            {"kind": "code", "half": half, "prompt": prompt, "source": str(path.relative_to(root.parent))}
        )
    return rows


def build(wikitext: Path) -> list[dict[str, str]]:
    """Every kind, both halves: text, code, then open questions (alternating halves)."""
    opened = [
        {"kind": "open", "half": ("tune", "heldout")[i % 2], "prompt": q, "source": "written for issue 31"}
        for i, q in enumerate(OPEN)
    ]
    return [*text_rows(wikitext), *code_rows(), *opened]


def write(rows: list[dict[str, str]], out: Path) -> None:
    """One JSON object per line; prints the count per kind and half."""
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    for key, n in sorted(Counter((r["kind"], r["half"]) for r in rows).items()):
        print(*key, n)
