"""Where a model reference is found, and its metadata then (info.py says what a model is).

A reference is a GGUF path, `hf:org/repo[:quant]` (the Hugging Face Hub), `STORE:name`
(another tool's store, e.g. Ollama's), or `testbed:KEY` (the test models `specctl models testbed`
provides). Metadata comes from the file when it is on disk (a model folder or GGUF in the local
Hugging Face cache counts), else from the Hub without downloading weights (models/hub.py, cached),
else, when the Hub cannot be reached, from the built-in catalog.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from specctl.orchestrator.config.adhoc import bare_repo
from specctl.orchestrator.contract.model import ModelInfo, Remote, RepoFile
from specctl.orchestrator.contract.stores import ModelStore
from specctl.orchestrator.errors import BadRefError, ModelError
from specctl.orchestrator.files import is_file, walk
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.humanize import size as human_size
from specctl.orchestrator.models import hf_meta, testbed
from specctl.orchestrator.models.catalog import BYTES_PER_WEIGHT
from specctl.orchestrator.models.gguf_meta import Remembered, read_metadata
from specctl.orchestrator.models.hub import SIDECARS, Hub, Repo, pick_quant
from specctl.orchestrator.models.info import (
    GGUF_QUANTS,
    ModelRef,
    from_catalog,
    from_gguf,
    from_hf_dir,
    parse_ref,
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
    files = sorted(Path(e.path) for here, entries in walk(snapshots, max_depth=8)
                   for e in entries if here != snapshots and e.name.endswith(".gguf")
                   and is_file(e))
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
    headers: Remembered | None = None  # GGUF headers remembered across commands
    _said: set[str] = field(default_factory=set, compare=False, repr=False)  # notes given

    def ref(self, text: str) -> ModelRef:
        """A parsed reference, in its store's spelling; an unknown scheme is a clear error."""
        ref = parse_ref(text)
        if ref.scheme in ("gguf", "hf", "testbed"):
            return ref
        store = self.stores.get(ref.scheme)
        if store is None:
            known = ", ".join(f"{s}:" for s in ["hf", "testbed", *self.stores])
            raise BadRefError(f"'{text}': unknown model source '{ref.scheme}:'; use a .gguf path "
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
        if ref.scheme == "gguf" and path is not None and bare_repo(ref.name):
            raise BadRefError(f"no file '{text}' here; did you mean hf:{text} (a model on the "
                              "Hugging Face Hub)?")
        if ref.scheme == "gguf" and path is not None and not path.exists():
            raise BadRefError(f"model file {path} not found; check the path (or name a Hub model, "
                              "hf:ORG/REPO[:QUANT])")
        if path is not None and hf_meta.is_hf_dir(path):
            return from_hf_dir(path, str(ref))
        if path is not None and (path.exists() or ref.scheme == "gguf"):
            return from_gguf(path, str(ref), self.headers)
        quant = ref.quant or default_quant or self.default_quant
        if ref.scheme == "testbed":
            return self._testbed_unfetched(ref, path)
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
        if ref.quant and ref.quant not in BYTES_PER_WEIGHT:  # no size to plan with: no guess
            close = difflib.get_close_matches(ref.quant, list(GGUF_QUANTS), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ModelError(f"'{text}': {ref.quant} is no quantisation specctl can size "
                             f"without the Hub (it knows {', '.join(sorted(GGUF_QUANTS))}); "
                             f"{hint}ask the Hub once with network to plan it")
        if unreachable:
            why = "as above" if self._said else unreachable  # one offline note per command
            self._said.add("offline")
            return replace(info, note=f"{info.name}: metadata from the built-in catalog (the "
                                      f"Hub could not be asked: {why})")
        return info

    def _testbed_unfetched(self, ref: ModelRef, path: Path | None) -> ModelInfo:
        """A test model not fetched yet: planned from the catalog at the path it will have
        (`up` fetches it first; the note says so)."""
        model = testbed.BY_KEY[ref.name]
        info = from_catalog(ModelRef("testbed", model.filename), "F16")
        if info is None or path is None:
            raise ModelError(f"{ref} is not on disk; {self.how_to_get(ref)}")
        size = model.size or info.size_bytes
        return replace(info, ref=str(ref), path=path, size_bytes=size, note=(
            f"{ref} is not fetched yet ({human_size(size)}): `specctl up` fetches it first "
            "(or `specctl models testbed`)"))

    def how_to_get(self, ref: ModelRef) -> str:
        if ref.scheme == "testbed":
            return "run `specctl models testbed`"
        if ref.scheme == "hf":
            return f"fetch it with `specctl models pull {shlex.quote(str(ref))}`"
        if ref.scheme in self.stores:
            return self.stores[ref.scheme].how_to_get(ref.name)
        return "check the path"

    def fetch(self, info: ModelInfo, say: Say) -> ModelInfo:
        """Download a Hub model that is not on disk (its GGUF, or its folder's files) into the
        Hugging Face cache; the same ModelInfo with the local path."""
        if info.path is not None or info.remote is None:
            return info
        if self.hub is None:
            raise ModelError(f"{info.ref} is not on disk and the Hub is not available here")
        remote = info.remote
        say(f"pulling {remote.short} ({human_size(remote.size_bytes)}, "
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


MAX_BASES = 4  # heads on a base model on a base model...: a chain that long is a loop


def from_hub(hub: Hub, ref: ModelRef, quant: str, via: tuple[str, ...] = ()) -> ModelInfo:
    """A Hub model's metadata without its weights: the GGUF header of the chosen quantisation,
    or the config and tokenizer of a model folder; the sizes are the Hub's. `via`: the repos
    of heads whose base model this is (configs naming each other, a->b->a, are an error)."""
    if ref.name in via or len(via) >= MAX_BASES:
        chain = " -> ".join((*via, ref.name))
        raise ModelError(f"{via[0]}: its base models name each other or go on too long "
                         f"({chain}); target a model with its own weights")
    repo = hub.repo(ref.name)
    if repo.ggufs():
        files = pick_quant(repo, ref.quant or (quant if quant in GGUF_QUANTS else None))
        header = hub.gguf_header(repo, files[0])
        base = from_gguf(header, str(ref))
        if ref.quant and ref.quant.lower() in SIDECARS:  # llama.cpp's sidecar beside a model
            base = replace(base, kind=ref.quant.lower(),
                           name=f"{repo.name.split('/')[1]} {ref.quant} sidecar")
        size = sum(f.size for f in files)
        return replace(base, path=None, meta_file=header, size_bytes=size, source="hub",
                       params_b=base.params_b or _params_from(header),
                       remote=_remote(repo, files, gguf=True),
                       note=f"{base.name}: metadata from the Hub ({repo.name}, {files[0].path}, "
                            f"{human_size(size)}, revision {repo.revision[:7]})")
    folder = hub.small_files(repo)
    base = from_hf_dir(folder, str(ref))
    if base.name == folder.name:  # named after the cache folder: the repo names it better
        base = replace(base, name=repo.name.split("/")[1])
    cfg = hf_meta.read_config(folder)
    parent = cfg.get("base_model_name_or_path")
    if not base.layers and isinstance(parent, str):
        parent_ref = parse_ref(f"hf:{parent}")
        return _heads_on(hub, from_hub(hub, parent_ref, quant, (*via, ref.name)), base, repo)
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
                        f"safetensors files, {human_size(size)}, revision {repo.revision[:7]})")


def _heads_on(hub: Hub, parent: ModelInfo, heads: ModelInfo, repo: Repo) -> ModelInfo:
    """A repo of speculative heads (Medusa) for a base model: the base's dimensions and
    tokenizer, with the heads' size added; it is served by its own repo id."""
    size = sum(f.size for f in repo.weights()) + parent.size_bytes
    return replace(parent, ref=heads.ref, name=repo.name.split("/")[1], kind=heads.kind,
                   spec_heads=heads.spec_heads, size_bytes=size,
                   note=f"{repo.name}: {heads.spec_heads} {heads.kind} heads on "
                        f"{parent.remote.repo if parent.remote else parent.name} ("
                        f"{human_size(size)} in all, from the Hub)")


def _remote(repo: Repo, files: list[RepoFile], gguf: bool) -> Remote:
    return Remote(repo.name, repo.revision, tuple(files), sum(f.size for f in files), gguf,
                  repo.base_model)


def _params_from(header: Path) -> float | None:
    """Billions of parameters from GGUF `general.size_label` ("72B", "500M")."""
    label = read_metadata(header).get("general.size_label")
    m = re.fullmatch(r"(?:\d+x)?([\d.]+)([BM])", str(label or ""))
    return float(m.group(1)) / (1 if m.group(2) == "B" else 1000) if m else None


