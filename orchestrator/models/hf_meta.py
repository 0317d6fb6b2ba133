"""Metadata of a Hugging Face model folder (config.json, tokenizer.json, weight files), the format
vLLM serves. The GGUF counterpart is gguf_meta."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specctl.orchestrator.errors import ModelError, first_problem
from specctl.orchestrator.files import UnreadableError, read_text

MAX_JSON = 256 << 20  # a tokenizer.json of a 256k vocabulary is tens of MB
WEIGHTS = ("*.safetensors", "*.bin", "*.pt")
TOKENIZER_TYPES = {"BPE": "bpe", "Unigram": "ugm", "WordPiece": "wpm"}


def is_hf_dir(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file()


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_text(path, limit=MAX_JSON))
    except (OSError, UnreadableError, ValueError, RecursionError) as exc:
        raise ModelError(f"{path} is unreadable ({first_problem(exc)}); download the model "
                         "again") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path} is not a JSON object")
    return data


def read_config(folder: Path) -> dict[str, Any]:
    config = _json(folder / "config.json")
    return config.get("text_config", config) if "num_hidden_layers" not in config else config


def weights_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for pattern in WEIGHTS for p in folder.glob(pattern))


def tokenizer_type(folder: Path) -> str:
    path = folder / "tokenizer.json"
    if not path.is_file():
        return "unknown"
    return TOKENIZER_TYPES.get(str(_json(path).get("model", {}).get("type")), "unknown")


def read_tokens(folder: Path) -> list[str]:
    """Token texts by id, from tokenizer.json (model vocab plus added tokens)."""
    data = _json(folder / "tokenizer.json")
    vocab = data.get("model", {}).get("vocab", {})
    by_id = {int(i): t for t, i in vocab.items()} if isinstance(vocab, dict) else {
        i: str(entry[0]) for i, entry in enumerate(vocab)}
    for added in data.get("added_tokens", []):
        by_id[int(added["id"])] = str(added["content"])
    return [by_id.get(i, "") for i in range(max(by_id, default=-1) + 1)]
