"""Metadata of a Hugging Face model folder (config.json, tokenizer.json, weight files), the format
vLLM serves. The GGUF counterpart is gguf_meta.

Both files are untrusted input (a download, the Hub's answer, a folder in SPECCTL_MODELS_DIRS):
read bounded, parsed by strict models of the fields planning uses (a head count that is text, a
vocabulary size of 1e30, an added token id of 10^12 are errors naming the file), never turned
into a traceback, a MemoryError or a hang.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specctl.orchestrator.errors import ModelError, first_problem
from specctl.orchestrator.files import UnreadableError, read_text

MAX_JSON = 256 << 20  # a tokenizer.json of a 256k vocabulary is tens of MB
MAX_CONFIG = 4 << 20  # a config.json is a few KB
MAX_VOCAB = 1 << 22  # token ids (the largest vocabularies have ~262k)
WEIGHTS = ("*.safetensors", "*.bin", "*.pt")
TOKENIZER_TYPES = {"BPE": "bpe", "Unigram": "ugm", "WordPiece": "wpm"}

Count = Annotated[int, Field(ge=0, le=1 << 24)]
Name = Annotated[str, Field(max_length=4096)]
TokenId = Annotated[int, Field(ge=0, lt=MAX_VOCAB)]
TokenText = Annotated[str, Field(max_length=64 << 10)]
Ids = Annotated[int, Field(ge=0, lt=1 << 32)] | Annotated[
    list[Annotated[int, Field(ge=0, lt=1 << 32)]], Field(max_length=64)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="allow", frozen=True,
                              defer_build=True)


class _Quant(_Strict):
    bits: Count | None = None


class _Config(_Strict):
    """The config.json fields planning reads; others are kept as they are."""

    model_type: Name | None = None
    architectures: list[Name] | None = Field(None, max_length=64)
    num_hidden_layers: Count | None = None
    num_attention_heads: Count | None = None
    num_key_value_heads: Count | None = None
    head_dim: Count | None = None
    hidden_size: Count | None = None
    vocab_size: Count | None = None
    torch_dtype: Name | None = None
    dtype: Name | None = None
    quantization: _Quant | None = None
    quantization_config: _Quant | None = None
    bos_token_id: Ids | None = None
    eos_token_id: Ids | None = None
    medusa_num_heads: Count | None = None
    num_nextn_predict_layers: Count | None = None
    mtp_num_hidden_layers: Count | None = None
    base_model_name_or_path: Name | None = None
    name_or_path: Name | None = Field(None, alias="_name_or_path")
    text_config: _Config | None = None


class _Added(_Strict):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, defer_build=True)

    id: TokenId
    content: TokenText


class _TokModel(_Strict):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, defer_build=True)

    type: Name | None = None
    vocab: dict[TokenText, TokenId] | list[tuple[TokenText, float]] | None = Field(
        None, max_length=MAX_VOCAB)


class _Tokenizer(_Strict):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, defer_build=True)

    model: _TokModel | None = None
    added_tokens: list[_Added] | None = Field(None, max_length=1 << 20)


def is_hf_dir(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file()


def _read(path: Path, limit: int) -> str:
    try:
        return read_text(path, limit=limit)
    except (OSError, UnreadableError) as exc:
        raise ModelError(f"{path} is unreadable ({first_problem(exc)}); download the model "
                         "again") from None


def _parse(path: Path, model: type[_Strict], limit: int) -> Any:
    text = _read(path, limit)
    try:
        return model.model_validate_json(text)
    except (ValidationError, ValueError, RecursionError) as exc:
        raise ModelError(f"{path} is not a model file specctl can read ({first_problem(exc)}); "
                         "download the model again") from None


def read_config(folder: Path) -> dict[str, Any]:
    """config.json, checked (the nested text_config of a multimodal model when it holds the
    language model); fields that are null are left out."""
    config: _Config = _parse(folder / "config.json", _Config, MAX_CONFIG)
    if config.num_hidden_layers is None and config.text_config is not None:
        config = config.text_config
    return config.model_dump(by_alias=True, exclude_none=True)


def weights_bytes(folder: Path) -> int:
    """Bytes of the weight files (a broken link or an unreadable file counts for none)."""
    total = 0
    for pattern in WEIGHTS:
        for path in folder.glob(pattern):
            try:
                total += path.stat().st_size
            except (OSError, ValueError):
                continue
    return total


def tokenizer_type(folder: Path) -> str:
    path = folder / "tokenizer.json"
    if not path.is_file():
        return "unknown"
    tok: _Tokenizer = _parse(path, _Tokenizer, MAX_JSON)
    return TOKENIZER_TYPES.get(str(tok.model.type if tok.model else None), "unknown")


def read_tokens(folder: Path) -> list[str]:
    """Token texts by id, from tokenizer.json (model vocab plus added tokens)."""
    tok: _Tokenizer = _parse(folder / "tokenizer.json", _Tokenizer, MAX_JSON)
    vocab = tok.model.vocab if tok.model is not None else None
    by_id = {i: t for t, i in vocab.items()} if isinstance(vocab, dict) else {
        i: entry[0] for i, entry in enumerate(vocab or [])}
    for added in tok.added_tokens or []:
        by_id[added.id] = added.content
    return [by_id.get(i, "") for i in range(max(by_id, default=-1) + 1)]
