"""A model as the core and the adapters speak of it: its metadata (ModelInfo), read from a
GGUF header, a Hugging Face model folder's config or the built-in catalog (models/info.py reads
them), and where a model not on disk is on the Hub (Remote, its RepoFile files)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from specctl.orchestrator.humanize import size as human_size

_QUANT = re.compile(r"[.-]((?:I?Q\d(?:_[A-Z0-9]+)*)|F16|F32|BF16)(?:-\d{5}-of-\d{5})?\.gguf$",
                    re.IGNORECASE)


class RepoFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    path: str = Field(min_length=1, max_length=1000)
    size: int = Field(ge=0)
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")

    @property
    def quant(self) -> str | None:
        m = _QUANT.search(self.path)
        return m.group(1).upper() if m else None


@dataclass(frozen=True)
class Remote:
    """Where a model not on disk is on the Hub: the files to fetch at a revision."""

    repo: str
    revision: str
    files: tuple[RepoFile, ...]  # a GGUF (its split parts in order) or a model folder's files
    size_bytes: int
    gguf: bool
    base_model: str | None = None  # the repo it was made from, as its model card says

    @property
    def short(self) -> str:
        return f"hf:{self.repo}@{self.revision[:7]}"


@dataclass(frozen=True)
class ModelInfo:
    ref: str
    name: str
    path: Path | None
    architecture: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    vocab_type: str
    tokenizer: str
    params_b: float | None
    quant: str | None
    size_bytes: int
    family: str = ""
    kind: str = "model"  # model | eagle | eagle3 | mtp (built-in MTP layers) | medusa
    spec_heads: int = 0  # built-in speculative heads: Medusa heads or MTP layers
    expert_share: float = 0.0  # an MoE: the share of its weights in experts (0: dense)
    context: int = 0  # the context it was trained for, in tokens (0: not known)
    bos_id: int | None = None
    eos_id: int | None = None
    add_bos: bool | None = None
    add_eos: bool | None = None
    source: Literal["file", "catalog", "hub"] = "catalog"
    meta_file: Path | None = None  # the metadata (GGUF header, config folder) when not on disk
    remote: Remote | None = None  # where to fetch it, when it is not on disk
    note: str = ""  # where the metadata came from, when that is worth saying

    @property
    def kv_bytes_per_token_f16(self) -> int:
        """K and V, all layers, at 2 bytes per element."""
        return self.layers * self.kv_heads * self.head_dim * 2 * 2

    @property
    def estimated(self) -> bool:
        """Its size is the catalog's estimate (parameters x bytes per weight), not a file's."""
        return self.source == "catalog" and self.path is None

    def describe(self) -> str:
        where = f" (on the Hub: {self.remote.short})" if self.remote else " (not on disk)"
        if self.estimated:
            where = " (the catalog's estimate: its file is not on disk)"
        size = ("about " if self.estimated else "") + human_size(self.size_bytes) + (
            "" if self.path else where)
        return f"{self.name} [{self.quant or '?'}] {size}"
