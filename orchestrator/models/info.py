"""What a model is: its reference (`hf:org/repo[:quant]`, a path, `STORE:name`, `testbed:KEY`)
and its metadata (ModelInfo), read from a GGUF header, a Hugging Face model folder's config, or
the built-in catalog. Where a reference is found is resolve.py's job."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.errors import BadRefError
from specctl.orchestrator.files import expand_user
from specctl.orchestrator.models import catalog, hf_meta, testbed
from specctl.orchestrator.models.gguf_meta import (
    ArrayInfo,
    Remembered,
    ValueType,
    count,
    file_type_name,
    read_metadata,
    text,
    token_id,
)

_STORE_SCHEME = re.compile(r"[a-z][a-z0-9]+")  # another tool's store, e.g. `NAME:model:tag`
VOCAB_TYPES = {"llama": "spm", "gpt2": "bpe", "bert": "wpm", "t5": "ugm", "rwkv": "rwkv"}
HEAD_ARCHS = ("eagle3", "dflash", "dspark")  # GGUF architectures that are draft heads
GGUF_QUANTS = frozenset(q for q in catalog.BYTES_PER_WEIGHT if q not in (
    "AWQ", "GPTQ", "INT4", "FP8", "BF16", "4BIT", "8BIT"))


@dataclass(frozen=True)
class ModelRef:
    scheme: str  # gguf, hf, testbed, or a store's scheme
    name: str
    quant: str | None = None

    def __str__(self) -> str:
        if self.scheme == "gguf":
            return self.name
        return f"{self.scheme}:{self.name}" + (f":{self.quant}" if self.quant else "")


def parse_ref(text: str) -> ModelRef:
    text = text.strip()
    if not text:
        raise BadRefError("empty model reference; use a .gguf path, hf:org/repo[:quant], "
                         "STORE:name (`specctl drafts` shows the stores) or testbed:KEY")
    scheme, sep, rest = text.partition(":")
    if sep and scheme == "hf":
        repo, _, quant = rest.partition(":")
        if repo.count("/") != 1 or not all(repo.split("/")):
            raise BadRefError(f"'{text}': a Hugging Face reference is hf:org/repo[:quant]")
        return ModelRef("hf", repo, quant.upper() or None)
    if sep and scheme == "testbed":
        if rest not in testbed.BY_KEY:
            raise BadRefError(f"unknown testbed model '{rest}'; known: {', '.join(testbed.BY_KEY)}")
        return ModelRef("testbed", rest)
    if sep and rest and _STORE_SCHEME.fullmatch(scheme) and not rest.startswith(("/", "\\")):
        return ModelRef(scheme, rest)  # the store named by the scheme checks the rest
    return ModelRef("gguf", str(expand_user(text)))


def from_gguf(path: Path, ref: str, remembered: Remembered | None = None) -> ModelInfo:
    meta = read_metadata(path, remembered=remembered)
    arch = text(meta, "general.architecture", path, "unknown")

    def num(key: str, default: int = 0) -> int:
        return count(meta, f"{arch}.{key}", path, default)

    heads = num("attention.head_count")
    head_dim = num("attention.key_length") or (num("embedding_length") // max(heads, 1))
    tokens = meta.get("tokenizer.ggml.tokens")
    tok_model = text(meta, "tokenizer.ggml.model", path, "none")
    name = text(meta, "general.name", path, "") or path.stem
    known = catalog.lookup(name) or catalog.lookup(path.stem)
    nextn = num("nextn_predict_layers")  # MTP layers carried by the file (llama.cpp's key)
    kind = arch if arch in HEAD_ARCHS else "mtp" if nextn else known.kind if known else "model"
    return ModelInfo(
        ref=ref, name=name, path=path, architecture=arch, layers=num("block_count"), heads=heads,
        kv_heads=num("attention.head_count_kv", heads), head_dim=head_dim,
        vocab_size=tokens.length if isinstance(tokens, ArrayInfo) and
        tokens.item_type == ValueType.STRING else 0,  # numbers are no vocabulary
        vocab_type=VOCAB_TYPES.get(tok_model, tok_model),
        tokenizer=f"gguf:{tok_model}/{text(meta, 'tokenizer.ggml.pre', path, '-')}",
        params_b=known.params_b if known else None,
        quant=file_type_name(meta), size_bytes=path.stat().st_size,
        family=known.family if known else arch, kind=kind, spec_heads=nextn,
        expert_share=known.expert_share if known else 0.0, context=num("context_length"),
        bos_id=token_id(meta, "tokenizer.ggml.bos_token_id"),
        eos_id=token_id(meta, "tokenizer.ggml.eos_token_id"),
        add_bos=_opt_bool(meta.get("tokenizer.ggml.add_bos_token")),
        add_eos=_opt_bool(meta.get("tokenizer.ggml.add_eos_token")), source="file",
    )


def from_hf_dir(folder: Path, ref: str) -> ModelInfo:
    """A Hugging Face model folder (what vLLM serves): config.json, tokenizer.json, weights."""
    cfg = hf_meta.read_config(folder)
    heads = int(cfg.get("num_attention_heads", 0))
    hidden = int(cfg.get("hidden_size", 0))
    name = folder.name if folder.name not in ("", ".") else ref
    known = catalog.lookup(str(cfg.get("_name_or_path", ""))) or catalog.lookup(name)
    archs = cfg.get("architectures") or [cfg.get("model_type", "unknown")]
    return ModelInfo(
        ref=ref, name=known.name if known else name, path=folder,
        architecture=str(cfg.get("model_type", archs[0])),
        layers=int(cfg.get("num_hidden_layers", 0)), heads=heads,
        kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or (hidden // heads if heads else 0)),
        vocab_size=int(cfg.get("vocab_size", 0)), vocab_type=hf_meta.tokenizer_type(folder),
        tokenizer=f"hf:{hf_meta.tokenizer_type(folder)}",
        params_b=known.params_b if known else None,
        quant=_hf_quant(cfg),
        size_bytes=hf_meta.weights_bytes(folder), family=known.family if known else
        str(cfg.get("model_type", "")), kind=_kind(cfg, known.kind if known else "model"),
        spec_heads=_spec_heads(cfg),
        context=max(_opt_int(cfg.get("max_position_embeddings")) or 0, 0),
        bos_id=_opt_int(cfg.get("bos_token_id")), eos_id=_opt_int(cfg.get("eos_token_id")),
        source="file")


def _hf_quant(cfg: dict[str, Any]) -> str:
    """'4BIT' for an MLX-quantised folder (its `quantization.bits`), else the dtype ('BF16')."""
    q = cfg.get("quantization") or cfg.get("quantization_config")
    bits = q.get("bits") if isinstance(q, dict) else None
    if isinstance(bits, int) and not isinstance(bits, bool):
        return f"{bits}BIT"
    return str(cfg.get("torch_dtype") or cfg.get("dtype") or "bf16").upper()


def _spec_heads(cfg: dict[str, Any]) -> int:
    """Medusa heads (`medusa_num_heads`) or MTP layers (`num_nextn_predict_layers`)."""
    for key in ("medusa_num_heads", "num_nextn_predict_layers", "mtp_num_hidden_layers"):
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _kind(cfg: dict[str, Any], default: str) -> str:
    if "medusa_num_heads" in cfg:
        return "medusa"
    archs = " ".join(str(a) for a in cfg.get("architectures") or []).lower()
    if "eagle3" in archs:
        return "eagle3"
    if "eagle" in archs:
        return "eagle"
    return "mtp" if _spec_heads(cfg) and default == "model" else default


def _opt_int(v: Any) -> int | None:
    return int(v) if isinstance(v, int) else None


def _opt_bool(v: Any) -> bool | None:
    return bool(v) if isinstance(v, bool) else None


def from_catalog(ref: ModelRef, default_quant: str) -> ModelInfo | None:
    known = catalog.lookup(ref.name)
    if known is None:
        return None
    quant = ref.quant or catalog.quant_in(ref.name) or default_quant
    size = int(known.params_b * 1e9 * catalog.BYTES_PER_WEIGHT.get(quant, 2.0))
    return ModelInfo(
        ref=str(ref), name=known.name, path=None, architecture=known.architecture,
        layers=known.layers, heads=known.heads, kv_heads=known.kv_heads, head_dim=known.head_dim,
        vocab_size=known.vocab, vocab_type=known.vocab_type, tokenizer=known.tokenizer,
        params_b=known.params_b, quant=quant, size_bytes=size, family=known.family,
        kind=known.kind, spec_heads=known.spec_heads, expert_share=known.expert_share,
        context=known.context,
    )
