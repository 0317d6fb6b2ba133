"""Tiny GGUF files written with the `gguf` package: metadata only, no tensors."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import gguf

DEFAULT_TOKENS: tuple[str, ...] = tuple(f"tok{i}" for i in range(16))


def write_gguf(
    path: Path,
    *,
    arch: str = "qwen2",
    name: str | None = "tiny test model",
    block_count: int = 4,
    heads: int = 8,
    kv_heads: int = 2,
    embedding: int = 512,
    key_length: int | None = None,
    tokenizer_model: str = "gpt2",
    tokenizer_pre: str | None = "qwen2",
    tokens: Sequence[str] = DEFAULT_TOKENS,
    bos: int | None = 1,
    eos: int | None = 2,
    add_bos: bool | None = False,
    add_eos: bool | None = None,
    file_type: int | None = int(gguf.LlamaFileType.MOSTLY_Q4_K_M),
    context: int | None = None,
) -> Path:
    """Write a GGUF with the given metadata and return its path."""
    writer = gguf.GGUFWriter(path, arch)
    if name is not None:
        writer.add_name(name)
    writer.add_block_count(block_count)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_embedding_length(embedding)
    if key_length is not None:
        writer.add_key_length(key_length)
    if context is not None:
        writer.add_context_length(context)
    if file_type is not None:
        writer.add_file_type(file_type)
    writer.add_tokenizer_model(tokenizer_model)
    if tokenizer_pre is not None:
        writer.add_tokenizer_pre(tokenizer_pre)
    writer.add_token_list(list(tokens))
    if bos is not None:
        writer.add_bos_token_id(bos)
    if eos is not None:
        writer.add_eos_token_id(eos)
    if add_bos is not None:
        writer.add_add_bos_token(add_bos)
    if add_eos is not None:
        writer.add_add_eos_token(add_eos)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
