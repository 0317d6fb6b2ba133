"""Model references and their metadata.

A reference is a GGUF path, `hf:org/repo[:quant]` (the Hugging Face Hub), `STORE:name`
(another tool's store, e.g. Ollama's), or `testbed:KEY` (the test models `specctl models testbed`
provides). Metadata comes from the file when it is on disk (a model folder or GGUF in the local
Hugging Face cache counts), else from the Hub without downloading weights (models/hub.py, cached),
else, when the Hub cannot be reached, from the built-in catalog.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from specctl.adapters.base import ModelStore
from specctl.orchestrator.errors import ModelError
from specctl.orchestrator.models import catalog, hf_meta, testbed
from specctl.orchestrator.models.gguf_meta import ArrayInfo, file_type_name, read_metadata
from specctl.orchestrator.models.hub import Hub, Repo, RepoFile, pick_quant

_STORE_SCHEME = re.compile(r"[a-z][a-z0-9]+")  # another tool's store, e.g. `NAME:model:tag`
VOCAB_TYPES = {"llama": "spm", "gpt2": "bpe", "bert": "wpm", "t5": "ugm", "rwkv": "rwkv"}
GB = 1e9
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
        raise ModelError("empty model reference; use a .gguf path, hf:org/repo[:quant], "
                         "STORE:name (`specctl drafts` shows the stores) or testbed:KEY")
    scheme, sep, rest = text.partition(":")
    if sep and scheme == "hf":
        repo, _, quant = rest.partition(":")
        if repo.count("/") != 1 or not all(repo.split("/")):
            raise ModelError(f"'{text}': a Hugging Face reference is hf:org/repo[:quant]")
        return ModelRef("hf", repo, quant.upper() or None)
    if sep and scheme == "testbed":
        if rest not in testbed.BY_KEY:
            raise ModelError(f"unknown testbed model '{rest}'; known: {', '.join(testbed.BY_KEY)}")
        return ModelRef("testbed", rest)
    if sep and rest and _STORE_SCHEME.fullmatch(scheme) and not rest.startswith(("/", "\\")):
        return ModelRef(scheme, rest)  # the store named by the scheme checks the rest
    return ModelRef("gguf", str(Path(text).expanduser()))


@dataclass(frozen=True)
class Remote:
    """Where a model not on disk is on the Hub: the files to fetch at a revision."""

    repo: str
    revision: str
    files: tuple[RepoFile, ...]  # a GGUF (its split parts in order) or a model folder's files
    size_bytes: int
    gguf: bool

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
    bos_id: int | None = None
    eos_id: int | None = None
    add_bos: bool | None = None
    add_eos: bool | None = None
    source: Literal["file", "catalog", "hub"] = "catalog"
    meta_file: Path | None = None  # the metadata (GGUF header, config folder) when not on disk
    remote: Remote | None = None  # where to fetch it, when it is not on disk
    note: str = ""  # where the metadata came from, when that is worth saying

    @property
    def weights_gb(self) -> float:
        return self.size_bytes / GB

    @property
    def kv_bytes_per_token_f16(self) -> int:
        """K and V, all layers, at 2 bytes per element."""
        return self.layers * self.kv_heads * self.head_dim * 2 * 2

    def describe(self) -> str:
        where = f" (on the Hub: {self.remote.short})" if self.remote else " (not on disk)"
        size = f"{self.weights_gb:.1f} GB" + ("" if self.path else where)
        return f"{self.name} [{self.quant or '?'}] {size}"


def from_gguf(path: Path, ref: str) -> ModelInfo:
    meta = read_metadata(path)
    arch = str(meta.get("general.architecture", "unknown"))

    def num(key: str, default: int = 0) -> int:
        value = meta.get(f"{arch}.{key}", default)
        return int(max(value) if isinstance(value, list) else
                   default if isinstance(value, ArrayInfo) else value)

    heads = num("attention.head_count")
    head_dim = num("attention.key_length") or (num("embedding_length") // max(heads, 1))
    tokens = meta.get("tokenizer.ggml.tokens")
    tok_model = str(meta.get("tokenizer.ggml.model", "none"))
    name = str(meta.get("general.name") or path.stem)
    known = catalog.lookup(name) or catalog.lookup(path.stem)
    return ModelInfo(
        ref=ref, name=name, path=path, architecture=arch, layers=num("block_count"), heads=heads,
        kv_heads=num("attention.head_count_kv", heads), head_dim=head_dim,
        vocab_size=tokens.length if isinstance(tokens, ArrayInfo) else 0,
        vocab_type=VOCAB_TYPES.get(tok_model, tok_model),
        tokenizer=f"gguf:{tok_model}/{meta.get('tokenizer.ggml.pre', '-')}",
        params_b=known.params_b if known else None,
        quant=file_type_name(meta), size_bytes=path.stat().st_size,
        family=known.family if known else arch, kind=known.kind if known else "model",
        bos_id=_opt_int(meta.get("tokenizer.ggml.bos_token_id")),
        eos_id=_opt_int(meta.get("tokenizer.ggml.eos_token_id")),
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
        kind=known.kind,
    )


def hf_cache_dir(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    if "HF_HUB_CACHE" in env:
        return Path(env["HF_HUB_CACHE"])
    return Path(env.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"


def find_hf_snapshot(ref: ModelRef, hub: Path) -> Path | None:
    """The model folder of `ref` in the local Hugging Face cache (vLLM's format), if any."""
    snapshots = hub / f"models--{ref.name.replace('/', '--')}" / "snapshots"
    found = sorted(snapshots.glob("*/config.json")) if snapshots.is_dir() else []
    complete = [f.parent for f in found if hf_meta.weights_bytes(f.parent)]
    return complete[-1] if complete else None


def find_hf_gguf(ref: ModelRef, hub: Path) -> Path | None:
    """The GGUF file of `ref` in the local Hugging Face cache (quant matched), if any."""
    snapshots = hub / f"models--{ref.name.replace('/', '--')}" / "snapshots"
    files = sorted(snapshots.glob("*/**/*.gguf")) if snapshots.is_dir() else []
    if ref.quant:
        files = [f for f in files if ref.quant in f.name.upper().replace("-", "_")]
    for f in files:
        m = re.search(r"-(\d{5})-of-(\d{5})\.gguf$", f.name)
        if m is None:
            return f
        parts = [f.with_name(f.name.replace(f"-{m.group(1)}-of-", f"-{i:05d}-of-"))
                 for i in range(1, int(m.group(2)) + 1)]
        if m.group(1) == "00001" and all(p.is_file() for p in parts):
            return f  # a split GGUF is on disk when all its parts are
    return None


@dataclass(frozen=True)
class Resolver:
    """Turns references into ModelInfo. Holds where to look; does no I/O until asked."""

    models_dir: Path
    hf_hub: Path
    stores: Mapping[str, ModelStore] = field(default_factory=dict)  # scheme -> store
    default_quant: str = "Q4_K_M"
    hub: Hub | None = None  # Hugging Face Hub metadata (None: local files and catalog only)

    def ref(self, text: str) -> ModelRef:
        """A parsed reference, in its store's spelling; an unknown scheme is a clear error."""
        ref = parse_ref(text)
        if ref.scheme in ("gguf", "hf", "testbed"):
            return ref
        store = self.stores.get(ref.scheme)
        if store is None:
            known = ", ".join(f"{s}:" for s in ["hf", "testbed", *self.stores])
            raise ModelError(f"'{text}': unknown model source '{ref.scheme}:'; use a .gguf path "
                             f"or one of {known}")
        return ModelRef(ref.scheme, store.normalize(ref.name), ref.quant)

    def locate(self, ref: ModelRef, quant: str) -> Path | None:
        if ref.scheme == "gguf":
            return Path(ref.name)
        if ref.scheme == "testbed":
            return testbed.path_of(ref.name, self.models_dir)
        if ref.scheme == "hf":
            if (ref.quant or quant) in GGUF_QUANTS:
                return find_hf_gguf(ref, self.hf_hub)
            return find_hf_snapshot(ref, self.hf_hub)
        store = self.stores.get(ref.scheme)
        return store.locate(ref.name) if store is not None else None

    def resolve(self, text: str, default_quant: str | None = None) -> ModelInfo:
        ref = self.ref(text)
        path = self.locate(ref, default_quant or self.default_quant)
        if path is not None and hf_meta.is_hf_dir(path):
            return from_hf_dir(path, str(ref))
        if path is not None and (path.exists() or ref.scheme == "gguf"):
            return from_gguf(path, str(ref))
        quant = ref.quant or default_quant or self.default_quant
        unreachable = ""
        if ref.scheme == "hf" and self.hub is not None:
            try:
                return from_hub(self.hub, ref, quant)
            except ModelError as exc:
                if "cannot reach" not in str(exc) and "HF_HUB_OFFLINE" not in str(exc):
                    raise
                unreachable = str(exc)
        info = from_catalog(ref, quant)
        if info is None:
            raise ModelError(unreachable or f"model '{text}' is not on disk and not in the "
                             f"catalog; {self.how_to_get(ref)}")
        if unreachable:
            return replace(info, note=f"{info.name}: metadata from the built-in catalog (the "
                                      f"Hub could not be asked: {unreachable})")
        return info

    def how_to_get(self, ref: ModelRef) -> str:
        if ref.scheme == "testbed":
            return "run `specctl models testbed`"
        if ref.scheme == "hf":
            return f"fetch it with `specctl models pull {shlex.quote(str(ref))}`"
        if ref.scheme in self.stores:
            return self.stores[ref.scheme].how_to_get(ref.name)
        return "check the path"

    def fetch(self, info: ModelInfo, say: Callable[[str], None]) -> ModelInfo:
        """Download a Hub model that is not on disk (its GGUF, or its folder's files) into the
        Hugging Face cache; the same ModelInfo with the local path."""
        if info.path is not None or info.remote is None:
            return info
        if self.hub is None:
            raise ModelError(f"{info.ref} is not on disk and the Hub is not available here")
        remote = info.remote
        say(f"pulling {remote.short} ({remote.size_bytes / GB:.1f} GB, "
            f"{len(remote.files)} file(s)) into the Hugging Face cache")
        paths = [self.hub.fetch(remote.repo, remote.revision, f) for f in remote.files]
        local = paths[0] if remote.gguf else next(
            p.parent for p, f in zip(paths, remote.files, strict=True)
            if f.path == "config.json")
        return replace(info, path=local, source="file", remote=None)

    def require_file(self, info: ModelInfo) -> Path:
        """The file to serve; a clear error when the model is only known from the catalog."""
        if info.path is None:
            raise ModelError(f"{info.ref} is not on disk; {self.how_to_get(self.ref(info.ref))}")
        return info.path


def from_hub(hub: Hub, ref: ModelRef, quant: str) -> ModelInfo:
    """A Hub model's metadata without its weights: the GGUF header of the chosen quantisation,
    or the config and tokenizer of a model folder; the sizes are the Hub's."""
    repo = hub.repo(ref.name)
    if repo.ggufs():
        files = pick_quant(repo, ref.quant or (quant if quant in GGUF_QUANTS else None))
        header = hub.gguf_header(repo, files[0])
        base = from_gguf(header, str(ref))
        size = sum(f.size for f in files)
        return replace(base, path=None, meta_file=header, size_bytes=size, source="hub",
                       params_b=base.params_b or _params_from(header),
                       remote=_remote(repo, files, gguf=True),
                       note=f"{base.name}: metadata from the Hub ({repo.name}, {files[0].path}, "
                            f"{size / GB:.1f} GB, revision {repo.revision[:7]})")
    folder = hub.small_files(repo)
    base = from_hf_dir(folder, str(ref))
    if base.name == folder.name:  # named after the cache folder: the repo names it better
        base = replace(base, name=repo.name.split("/")[1])
    cfg = hf_meta.read_config(folder)
    parent = cfg.get("base_model_name_or_path")
    if not base.layers and isinstance(parent, str) and parent != ref.name:
        return _heads_on(hub, from_hub(hub, ModelRef("hf", parent), quant), base, repo)
    weights = repo.weights()
    if not weights:
        raise ModelError(f"{repo.name} has neither GGUF nor safetensors weights")
    keep = [f for f in repo.files if f.path.endswith((".json", ".safetensors", ".model",
                                                      ".txt", ".tiktoken", ".py"))]
    size = sum(f.size for f in weights)
    params = repo.params / 1e9 if repo.params else base.params_b
    return replace(base, path=None, meta_file=folder, size_bytes=size, source="hub",
                   params_b=params, remote=_remote(repo, keep, gguf=False),
                   note=f"{base.name}: metadata from the Hub ({repo.name}, {len(weights)} "
                        f"safetensors files, {size / GB:.1f} GB, revision {repo.revision[:7]})")


def _heads_on(hub: Hub, parent: ModelInfo, heads: ModelInfo, repo: Repo) -> ModelInfo:
    """A repo of speculative heads (Medusa) for a base model: the base's dimensions and
    tokenizer, with the heads' size added; it is served by its own repo id."""
    size = sum(f.size for f in repo.weights()) + parent.size_bytes
    return replace(parent, ref=heads.ref, name=repo.name.split("/")[1], kind=heads.kind,
                   spec_heads=heads.spec_heads, size_bytes=size,
                   note=f"{repo.name}: {heads.spec_heads} {heads.kind} heads on "
                        f"{parent.remote.repo if parent.remote else parent.name} ("
                        f"{size / GB:.1f} GB in all, from the Hub)")


def _remote(repo: Repo, files: list[RepoFile], gguf: bool) -> Remote:
    return Remote(repo.name, repo.revision, tuple(files), sum(f.size for f in files), gguf)


def _params_from(header: Path) -> float | None:
    """Billions of parameters from GGUF `general.size_label` ("72B", "500M")."""
    label = read_metadata(header).get("general.size_label")
    m = re.fullmatch(r"(?:\d+x)?([\d.]+)([BM])", str(label or ""))
    return float(m.group(1)) / (1 if m.group(2) == "B" else 1000) if m else None


def with_quant(info: ModelInfo, quant: str) -> ModelInfo:
    if info.params_b is None:
        return info
    size = int(info.params_b * 1e9 * catalog.BYTES_PER_WEIGHT.get(quant, 2.0))
    return replace(info, quant=quant, size_bytes=size)
