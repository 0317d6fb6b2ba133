"""Draft selection: find candidate drafts, filter by the backend's real vocabulary rule, rank by
expected speedup. Every rejected candidate keeps its reason.

Candidates come from the models on this machine (specctl's cache, the Hugging Face cache, extra
GGUF folders, Ollama's store, LM Studio's folder) and from the built-in catalog of known pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from specctl.adapters.base import ModelStore
from specctl.orchestrator.errors import SpecctlError
from specctl.orchestrator.models import catalog
from specctl.orchestrator.models.resolve import ModelInfo, from_catalog, from_gguf, parse_ref
from specctl.orchestrator.planning import costmodel

LARGE_RATIO = 0.35  # a draft that costs more than this share of a target step rarely pays
ALPHA_SAME_FAMILY = 0.75
ALPHA_OTHER = 0.6
# Where a catalog draft can be downloaded: GGUF repo (llama.cpp) and original repo (vLLM).
DOWNLOAD = {
    "Llama-3.2-1B-Instruct": ("bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0",
                              "meta-llama/Llama-3.2-1B-Instruct"),
    "Llama-3.2-3B-Instruct": ("bartowski/Llama-3.2-3B-Instruct-GGUF:Q8_0",
                              "meta-llama/Llama-3.2-3B-Instruct"),
    "Llama-3.1-8B-Instruct": ("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF:Q4_K_M",
                              "meta-llama/Llama-3.1-8B-Instruct"),
    "Qwen2.5-Coder-0.5B-Instruct": ("bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q8_0",
                                    "Qwen/Qwen2.5-Coder-0.5B-Instruct"),
    "Qwen2.5-Coder-1.5B-Instruct": ("bartowski/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q8_0",
                                    "Qwen/Qwen2.5-Coder-1.5B-Instruct"),
    "Qwen2.5-0.5B-Instruct": ("bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q8_0",
                              "Qwen/Qwen2.5-0.5B-Instruct"),
    "Qwen3-0.6B": ("unsloth/Qwen3-0.6B-GGUF:Q8_0", "Qwen/Qwen3-0.6B"),
    "Qwen3-1.7B": ("unsloth/Qwen3-1.7B-GGUF:Q8_0", "Qwen/Qwen3-1.7B"),
    "DeepSeek-R1-Distill-Qwen-1.5B": ("bartowski/DeepSeek-R1-Distill-Qwen-1.5B-GGUF:Q8_0",
                                      "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"),
    "DeepSeek-R1-Distill-Llama-8B": ("bartowski/DeepSeek-R1-Distill-Llama-8B-GGUF:Q4_K_M",
                                     "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"),
    "gemma-3-1b-it": ("bartowski/google_gemma-3-1b-it-GGUF:Q8_0", "google/gemma-3-1b-it"),
    "EAGLE3-LLaMA3.1-Instruct-8B": ("", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"),
    "EAGLE3-LLaMA3.3-Instruct-70B": ("", "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"),
}
EAGLE3_FOR = {"EAGLE3-LLaMA3.1-Instruct-8B": "Llama-3.1-8B-Instruct",
              "EAGLE3-LLaMA3.3-Instruct-70B": "Llama-3.3-70B-Instruct"}


@dataclass(frozen=True)
class Found:
    ref: str
    path: Path | None
    source: str


@dataclass(frozen=True)
class Candidate:
    model: str
    name: str
    path: Path | None
    source: str
    compatible: bool
    reason: str
    score: float
    method: str = "draft"

    def to_json(self) -> dict[str, object]:
        return {"model": self.model, "name": self.name,
                "path": str(self.path) if self.path else None, "source": self.source,
                "compatible": self.compatible, "reason": self.reason,
                "score": round(self.score, 3), "method": self.method}


def scan_folders(folders: Iterable[tuple[Path, str]]) -> Iterator[Found]:
    for folder, source in folders:
        if folder.is_dir():
            for path in sorted(folder.rglob("*.gguf")):
                if "mmproj" not in path.name.lower() and path.is_file():
                    yield Found(str(path), path, source)


def scan_local(folders: list[tuple[Path, str]], hf_hub: Path,
               stores: Iterable[ModelStore] = ()) -> list[Found]:
    found = list(scan_folders([*folders, (hf_hub, "hf-cache")]))
    for store in stores:
        found += [Found(f"{store.scheme}:{name}", path, store.scheme)
                  for name, path in store.models()]
    return found


def catalog_entries(target: ModelInfo, formats: frozenset[str]) -> list[Found]:
    """Known drafts to download, in the model format the backend serves (GGUF or HF)."""
    out = []
    for known in catalog.CATALOG:
        gguf_repo, hf_repo = DOWNLOAD.get(known.name, ("", ""))
        repo = gguf_repo if "gguf" in formats else hf_repo
        if repo:
            out.append(Found(f"hf:{repo}", None, "catalog"))
    return out


def _score(target: ModelInfo, draft: ModelInfo) -> float:
    ratio = draft.size_bytes / max(target.size_bytes, 1)
    alpha = ALPHA_SAME_FAMILY if draft.family == target.family else ALPHA_OTHER
    return costmodel.best(costmodel.curve(alpha, ratio, 8)).speedup


Rule = Callable[[ModelInfo, ModelInfo], str | None]  # (target, draft) -> why not, or None


def judge(target: ModelInfo, draft: ModelInfo, found: Found, rule: Rule,
          heads: bool) -> Candidate:
    """`rule` is the backend's compatibility rule; `heads`: it loads EAGLE-3 heads (HF format)."""
    def cand(ok: bool, reason: str, score: float = 0.0, method: str = "draft") -> Candidate:
        return Candidate(found.ref, canonical(draft), found.path, found.source, ok, reason,
                         score, method)

    if draft.kind == "eagle3":
        wanted = EAGLE3_FOR.get(draft.name)
        if not heads:
            return cand(False, "EAGLE-3 head: needs a backend that loads Hugging Face heads "
                               "(method eagle3)")
        if wanted != target.name:
            return cand(False, f"EAGLE-3 head trained for {wanted}, not {target.name}")
        return cand(True, f"EAGLE-3 head trained for {target.name}", 2.5, "eagle3")
    reason = rule(target, draft)
    if reason is not None:
        return cand(False, reason)
    ratio = draft.size_bytes / max(target.size_bytes, 1)
    score = _score(target, draft)
    same = "same family" if draft.family == target.family else "other family, same vocab"
    large = (f"; at {ratio:.0%} of the target's size drafting may cost more than it saves"
             if ratio > LARGE_RATIO else "")
    return cand(True, f"compatible ({same}, size ratio {ratio:.2f}): predicted {score:.2f}x"
                      f"{large}", score)


def rank(target: ModelInfo, candidates: Iterable[Found], rule: Rule, heads: bool,
         backend_quant: str) -> list[Candidate]:
    """Judge every candidate (on-disk ones first, so catalog duplicates are dropped)."""
    out: list[Candidate] = []
    seen: set[str] = set()
    candidates = sorted(candidates, key=lambda f: f.path is None)
    target_file = target.path.resolve() if target.path else None
    for found in candidates:
        if found.path is not None and found.path.resolve() == target_file:
            continue
        try:
            if found.path is not None:
                draft = from_gguf(found.path, found.ref)
            else:
                info = from_catalog(parse_ref(found.ref), backend_quant)
                if info is None:
                    continue
                draft = info
        except SpecctlError as exc:
            out.append(Candidate(found.ref, found.ref, found.path, found.source, False,
                                 f"unreadable: {exc}", 0.0))
            continue
        name = canonical(draft)
        if found.path is None and (name in seen or name == canonical(target)):
            continue  # a catalog entry for a model already found on disk, or the target itself
        seen.add(name)
        out.append(judge(target, draft, found, rule, heads))
    return sorted(out, key=lambda c: (c.compatible, c.score, c.path is not None), reverse=True)


def canonical(info: ModelInfo) -> str:
    known = catalog.lookup(info.name) or catalog.lookup(info.ref)
    return known.name if known else info.name


def best_on_disk(ranked: list[Candidate]) -> Candidate | None:
    return next((c for c in ranked if c.compatible and c.path is not None), None)


def best_to_download(ranked: list[Candidate]) -> Candidate | None:
    return next((c for c in ranked if c.compatible and c.path is None), None)
