"""Build the speculative-decoding prompt sets (bench/prompts/spec_*.jsonl) — run once, output checked in.

`--set old` (issue 17, cited by docs): grounded — the answer reuses the prompt's text
(repeat/rewrite/extract/summarise a passage of WikiText-2 *valid*, or edit a short code file);
open — chat questions with nothing to copy. Each marks its last third `heldout` (field `split`).

`--set kinds` (issue 31, bench/spec_kinds.py): six kinds — copy, edit, quotes, summary, code,
open — each with a `tune` and a `heldout` half (field `half`), from text no draft policy was tuned
on: passages of the later articles of WikiText-2 *test*, functions of the project's own tests.

WikiText-2 (Merity et al. 2016) is CC BY-SA 3.0; the passages are quoted with that attribution.
Usage: python -m bench.make_spec_prompts [--set old|kinds] [--wikitext FILE]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from edgellm.common.paths import require_data_file

OUT = Path(__file__).parent / "prompts"

TASKS = (
    "Repeat the following passage word for word.",
    "Rewrite the following passage with corrected punctuation, keeping every sentence.",
    "Copy the first two sentences of the following passage exactly.",
    "Summarise the following passage, quoting its key sentences.",
)

CODE = (
    (
        "Rename the function `area` to `rectangle_area` everywhere in this file and return the whole file.",
        "def area(width, height):\n    return width * height\n\n\ndef total(shapes):\n"
        "    result = 0\n    for w, h in shapes:\n        result += area(w, h)\n    return result\n",
    ),
    (
        "Add type hints to every function in this file and return the whole file.",
        "def greet(name):\n    return 'Hello, ' + name\n\n\n"
        "def shout(text):\n    return text.upper() + '!'\n",
    ),
    (
        "Change every `print` call in this file to `logging.info` and return the whole file.",
        "import logging\n\n\ndef load(path):\n    print('loading', path)\n    with open(path) as f:\n"
        "        data = f.read()\n    print('loaded', len(data))\n    return data\n",
    ),
    (
        "Rename the variable `items` to `records` in this file and return the whole file.",
        "def count(items):\n    n = 0\n    for item in items:\n        if item:\n            n += 1\n"
        "    return n\n\n\ndef first(items):\n    return items[0] if items else None\n",
    ),
    (
        "Add a docstring to each function in this file and return the whole file.",
        "def mean(values):\n    return sum(values) / len(values)\n\n\ndef spread(values):\n"
        "    return max(values) - min(values)\n",
    ),
    (
        "Replace the for loop with a list comprehension in this file and return the whole file.",
        "def squares(n):\n    out = []\n    for i in range(n):\n        out.append(i * i)\n    return out\n",
    ),
)

OPEN = (
    "What are three tips for sleeping better?",
    "Why is the sky blue?",
    "Suggest a name for a small bakery.",
    "How do I boil an egg?",
    "What is the difference between weather and climate?",
    "Give me an idea for a weekend hobby.",
    "What should I pack for a day hike?",
    "Explain what a computer virus is.",
    "Write a short poem about autumn.",
    "How can I save money on groceries?",
    "What is photosynthesis?",
    "Tell me a fun fact about octopuses.",
    "How do I start learning to play the guitar?",
    "What are the benefits of drinking water?",
    "Describe a good morning routine.",
    "Why do cats purr?",
    "How does a rainbow form?",
    "What is a good way to learn a new language?",
    "Write a two-sentence story about a dragon.",
    "What makes a good friend?",
    "How do airplanes stay in the air?",
    "What are some healthy breakfast ideas?",
    "Explain gravity to a child.",
    "What is the tallest mountain in the world?",
    "How can I be more productive when working from home?",
    "What is the water cycle?",
    "Give me three ideas for a birthday party.",
    "Why do leaves change colour in autumn?",
    "What is a black hole?",
    "How do I make a cup of tea?",
)


def detokenize(text: str) -> str:
    """WikiText's tokenized form back to plain text (@-@, spaced punctuation)."""
    text = re.sub(r" @(.)@ ", r"\1", text)
    text = re.sub(r" ([,.;:!?)'])", r"\1", text)
    text = re.sub(r"\( ", "(", text)
    return text.replace(" 's", "'s").replace('" ', '"').strip()


def passages(path: Path, count: int, words: tuple[int, int] = (60, 110)) -> list[str]:
    """The first `count` body paragraphs with no <unk>, cut to whole sentences within `words`."""
    out: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("=") or "<unk>" in line:
            continue
        sentences = re.split(r"(?<=\.) ", detokenize(line))
        text = ""
        for s in sentences:
            if len((text + " " + s).split()) > words[1]:
                break
            text = (text + " " + s).strip()
        if len(text.split()) >= words[0]:
            out.append(text)
        if len(out) == count:
            break
    return out


def split(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """Mark the last third of a set held out."""
    cut = len(rows) * 2 // 3
    return [{**r, "split": "tune" if i < cut else "heldout"} for i, r in enumerate(rows)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--wikitext", type=Path, default=None, help="passages text (default: the bundled split of the set)"
    )
    parser.add_argument("--set", choices=("old", "kinds"), default="old")
    args = parser.parse_args()
    if args.set == "kinds":
        # Imported here so `python bench/make_spec_prompts.py` (the issue-17 sets) still runs as a
        # script; the kinds need `python -m bench.make_spec_prompts` (bench/ as a package).
        from bench import spec_kinds

        rows = spec_kinds.build(args.wikitext or require_data_file("wikitext2-test.txt"))
        spec_kinds.write(rows, OUT / "spec_kinds.jsonl")
        return
    grounded: list[dict[str, str]] = []
    wikitext = args.wikitext or require_data_file("wikitext2-valid.txt")
    for i, text in enumerate(passages(wikitext, 24)):
        grounded.append({"kind": "passage", "prompt": f"{TASKS[i % len(TASKS)]}\n\n{text}"})
    for i, (task, code) in enumerate(CODE):
        grounded.insert(4 * i + 3, {"kind": "code", "prompt": f"{task}\n\n```python\n{code}```"})
    opened = [{"kind": "chat", "prompt": q} for q in OPEN]
    OUT.mkdir(exist_ok=True)
    for name, rows in (("grounded", grounded), ("open", opened)):
        with (OUT / f"spec_{name}.jsonl").open("w", encoding="utf-8") as f:
            for row in split(rows):
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(name, len(rows))


if __name__ == "__main__":
    main()
