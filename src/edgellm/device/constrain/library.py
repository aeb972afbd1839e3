"""The one adapter over llguidance: import it (or refuse), compile a constraint, load the tokenizer.

llguidance is an optional device dependency (no Android wheel: docs/constrained.md says how to
build it in Termux), so it is imported on first use, never at module import: a daemon without it
serves free text and refuses constrained requests with FAILED_PRECONDITION, never answering them
unconstrained.
"""

from __future__ import annotations

import importlib
import json
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any

from edgellm.common.closed_schema import close_objects
from edgellm.common.errors import FailedPrecondition, InvalidArgument
from edgellm.common.json_depth import too_deep
from edgellm.common.logs import get_logger
from edgellm.common.manifest import check_depth
from edgellm.common.token_table import TokenTable
from edgellm.device.constrain.constraint import Constraint, ConstraintKind, check_constraint_size
from edgellm.engine.artifact import Artifact

if TYPE_CHECKING:
    import llguidance

log = get_logger(__name__)

INSTALL = (
    "install llguidance in the daemon's Python: `pip install llguidance` (in Termux there is no "
    "wheel: `pkg install rust maturin`, then `pip install llguidance` builds it; docs/constrained.md)"
)
# Why bounded whitespace: llguidance's default lets JSON carry `[ \t\n\r]+` between any two tokens,
# and a 135M model sampled at temperature 0.8 can spend its whole token budget on newlines. One
# space, or one or two newlines and an indent of up to 20, is llama.cpp's json-schema-to-grammar
# rule; a schema can still choose its own with an "x-guidance" object.
JSON_DEFAULTS = {"whitespace_pattern": r"(?: |\n{1,2}[ \t]{0,20})"}
ANY_OBJECT = '{"type": "object"}'
# Why a depth cap: close_objects walks a schema recursively, and a schema nested 600 deep hit
# Python's recursion limit (RecursionError, answered INTERNAL: finding L2); real ones nest < 10.
MAX_SCHEMA_DEPTH = 64
# llguidance's parser limits, explicit rather than whatever the installed version defaults to
# (finding L13), so compile work per request stays bounded: grammar symbols and lexer states at a
# fifth and two fifths of llguidance 1.x's defaults (a 64 KiB schema needs well under 20,000
# symbols), fuel and Earley items at its defaults, and errors without parser dumps.
PARSER_LIMITS = {
    "max_items_in_row": 2_000,
    "initial_lexer_fuel": 1_000_000,
    "step_lexer_fuel": 200_000,
    "step_max_items": 50_000,
    "max_lexer_states": 100_000,
    "max_grammar_size": 100_000,
    "verbose_errors": False,
}


def parser_limits(lib: ModuleType, **overrides: int) -> llguidance.LLParserLimits:
    """llguidance's LLParserLimits with PARSER_LIMITS (OVERRIDES win: tests)."""
    limits: llguidance.LLParserLimits = lib.LLParserLimits(**{**PARSER_LIMITS, **overrides})
    return limits


def load_library() -> ModuleType:
    """The llguidance module, or FailedPrecondition saying how to install it."""
    try:
        return importlib.import_module("llguidance")
    except ImportError as err:
        raise FailedPrecondition(f"this daemon cannot constrain output: {err}; {INSTALL}") from err


def compile_grammar(
    lib: ModuleType, constraint: Constraint, limits: llguidance.LLParserLimits | None = None
) -> str:
    """llguidance's grammar for a constraint; InvalidArgument (with the library's message) if it is bad."""
    field = f"constraint.{constraint.kind.value}"
    check_constraint_size(field, constraint.text)
    limits = limits if limits is not None else parser_limits(lib)
    matcher = lib.LLMatcher
    if constraint.kind == ConstraintKind.JSON_OBJECT:
        grammar: str = matcher.grammar_from_json_schema(ANY_OBJECT, defaults=JSON_DEFAULTS)
        return grammar
    if not constraint.text.strip():
        raise InvalidArgument(f"{field} is empty")
    if constraint.kind == ConstraintKind.JSON_SCHEMA:
        grammar = _schema_grammar(matcher, field, constraint.text)
    elif constraint.kind == ConstraintKind.REGEX:
        grammar = matcher.grammar_from_regex(constraint.text)
    else:
        grammar = matcher.grammar_from_lark(constraint.text)
    failed, messages = matcher.validate_grammar_with_warnings(grammar, limits=limits)
    if failed:
        raise InvalidArgument(f"{field} is invalid: {messages[0].strip()}")
    if messages:
        log.info("constraint_warnings", kind=constraint.kind.value, warnings=messages)
    return grammar


def _schema_grammar(matcher: Any, field: str, text: str) -> str:
    """llguidance's grammar for a JSON schema, read within the depth and size limits, objects closed."""
    if too_deep(text, MAX_SCHEMA_DEPTH):
        raise InvalidArgument(f"{field} is nested more than {MAX_SCHEMA_DEPTH} levels deep")
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as err:
        raise InvalidArgument(f"{field} is not valid JSON: {err}") from err
    except (ValueError, RecursionError):  # an int over 4,300 digits; nesting past the C parser's limit
        raise InvalidArgument(
            f"{field} is not JSON this daemon reads (nested over {MAX_SCHEMA_DEPTH} levels, or a "
            "number over 4,300 digits)"
        ) from None
    check_depth(schema, MAX_SCHEMA_DEPTH, field)
    if not isinstance(schema, dict | bool):
        kind = type(schema).__name__
        raise InvalidArgument(f"{field} must be a JSON object (or true/false), got {kind}")
    try:
        closed = json.dumps(close_objects(schema))  # objects closed unless they say otherwise
        grammar: str = matcher.grammar_from_json_schema(closed, defaults=JSON_DEFAULTS)
    except ValueError as err:
        raise InvalidArgument(f"{field} is invalid: {err}") from err
    return grammar


class GrammarTokenizer:
    """The loaded model's vocabulary as llguidance sees it, checked byte for byte against tokens.bin."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, vocab_size: int, build_ms: float) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size  # the logits' length
        self.build_ms = build_ms

    @classmethod
    def open(cls, lib: ModuleType, artifact: Artifact) -> GrammarTokenizer:
        """Build it from the artifact's tokenizer.json (~0.3-2 s, once per model); refuse old artifacts."""
        name = artifact.manifest.tokenizer.hf_tokenizer
        if name is None:
            raise FailedPrecondition(
                f"artifact {artifact.name} ({artifact.artifact_id[:12]}) carries no tokenizer.json, "
                "which constrained output needs: rebuild it with this edgellm "
                "(`edgellm convert` or `edgellm quantize`)"
            )
        start = time.perf_counter()
        vocab = artifact.manifest.model.vocab_size
        try:
            text = (artifact.path / name).read_text(encoding="utf-8")
            tokenizer = lib.LLTokenizer(text, n_vocab=vocab, eos_token=sorted(artifact.stop_token_ids))
        except (OSError, ValueError, RuntimeError) as err:
            why = err.strerror if isinstance(err, OSError) else str(err)  # an OSError's text has the path
            raise FailedPrecondition(
                f"artifact {artifact.artifact_id[:12]}: {name} cannot be read: {why}"
            ) from err
        _check_bytes(tokenizer, TokenTable(artifact.token_table), artifact, name)
        build_ms = (time.perf_counter() - start) * 1000
        log.info("grammar_tokenizer_ready", artifact=artifact.name, build_ms=round(build_ms, 1))
        return cls(tokenizer, vocab, build_ms)


def _check_bytes(tokenizer: llguidance.LLTokenizer, table: TokenTable, artifact: Artifact, name: str) -> None:
    """Refuse a tokenizer.json whose token bytes differ from tokens.bin: every mask would be wrong."""
    for token in range(len(table)):
        expected = table.bytes_of(token)
        # Why skipped: llguidance marks special tokens with a leading 0xFF byte in its token trie, so
        # it reads a token that starts with 0xFF as empty. 0xFF never occurs in UTF-8, so such a
        # token (a raw-byte token some vocabularies keep) can never be part of constrained text.
        if expected.startswith(b"\xff"):
            continue
        if tokenizer.decode_bytes([token]) != expected:
            raise FailedPrecondition(
                f"artifact {artifact.artifact_id[:12]}: {name} reads token {token} as "
                f"{tokenizer.decode_bytes([token])!r} but tokens.bin says {expected!r}; "
                "rebuild the artifact with this edgellm"
            )


class TokenizerCache:
    """The GrammarTokenizer of the loaded model, built on first use and kept while it stays loaded."""

    def __init__(self) -> None:
        self._key = ""
        self._tokenizer: GrammarTokenizer | None = None

    def clear(self) -> None:
        """Forget the tokenizer (the model was unloaded): its memory goes with the model's."""
        self._key, self._tokenizer = "", None

    def get(self, lib: ModuleType, artifact: Artifact) -> GrammarTokenizer:
        """The artifact's GrammarTokenizer (built now if the loaded model changed)."""
        if self._tokenizer is None or self._key != artifact.artifact_id:
            self._tokenizer = GrammarTokenizer.open(lib, artifact)
            self._key = artifact.artifact_id
        return self._tokenizer
