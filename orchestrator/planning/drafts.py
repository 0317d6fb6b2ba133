"""Draft selection: find candidate drafts, filter by the backend's real vocabulary rule, rank by
expected speedup. Every rejected candidate keeps its reason.

Candidates come from the models on this machine (specctl's cache, the Hugging Face cache, extra
GGUF folders, Ollama's store, LM Studio's folder), from the Hugging Face Hub (smaller models of
the target's family by the same publisher, read without downloading weights), from the built-in
catalog of known pairs (the offline fallback), and draftless methods: the target's own MTP heads
and n-gram prompt lookup. Candidates must fit the memory left after the target.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.contract.plan import Method
from specctl.orchestrator.contract.stores import ModelStore
from specctl.orchestrator.errors import SpecctlError
from specctl.orchestrator.files import is_file, walk
from specctl.orchestrator.models import catalog
from specctl.orchestrator.models.gguf_meta import Remembered
from specctl.orchestrator.models.hub import Hub
from specctl.orchestrator.models.info import from_catalog, from_gguf, from_hf_dir, parse_ref
from specctl.orchestrator.planning import costmodel
from specctl.orchestrator.sizes import gib

LARGE_RATIO = 0.35  # a draft that costs more than this share of a target step rarely pays
HUB_MAX_RATIO = 0.25  # Hub candidates: at most this share of the target's parameters
HUB_CHECKED = 6  # Hub candidates whose metadata is read (each is a few ranged requests)
UNREAD = "cannot be read from the Hub: "  # a candidate the Hub does not give (its reason)
NGRAM_SCORE = 1.05  # n-gram has no draft cost but pays only where outputs copy the prompt
_SIZE = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)([BbMm])(?![A-Za-z0-9])")
ALPHA_SAME_FAMILY = 0.75  # acceptance assumed until `tune` measures it: a draft of the family
ALPHA_OTHER = 0.6  # another family with the same vocabulary
MAX_PREDICTED_K = 8
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
HEAD_KINDS = ("eagle3", "dflash")  # heads published in their own repos
ALPHA_MTP = 0.8  # MTP layers are trained with the model: they accept more than a small draft
MTP_SCORE_K = 3
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
    method: Method = "draft"

    def to_json(self) -> dict[str, object]:
        return {"model": self.model, "name": self.name,
                "path": str(self.path) if self.path else None, "source": self.source,
                "compatible": self.compatible, "reason": self.reason,
                "score": round(self.score, 3), "method": self.method}


def scan_folders(folders: Iterable[tuple[Path, str]]) -> Iterator[Found]:
    """GGUF files, and model folders (config.json beside safetensors weights)."""
    for folder, source in folders:
        for here, entries in walk(folder):
            names = {e.name for e in entries}
            for entry in entries:
                if entry.name.endswith(".gguf") and "mmproj" not in entry.name.lower() and \
                        is_file(entry):
                    yield Found(entry.path, Path(entry.path), source)
            if "config.json" in names and any(n.endswith(".safetensors") for n in names):
                yield Found(str(here), here, source)


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


def size_label(name: str) -> float | None:
    """Billions of parameters from a model name ('Qwen2.5-0.5B-Instruct' -> 0.5)."""
    m = _SIZE.search(name.replace("_", "-"))
    return float(m.group(1)) / (1 if m.group(2) in "Bb" else 1000) if m else None


def family_word(repo: str) -> str:
    """The family a repo name starts with: 'bartowski/Meta-Llama-3.1-70B-Instruct-GGUF' ->
    'Llama', 'Qwen/Qwen2.5-72B-Instruct' -> 'Qwen'."""
    name = repo.split("/")[-1].removeprefix("Meta-").removeprefix("meta-")
    m = re.match(r"[A-Za-z]+", name)
    return m.group(0) if m else name


def hub_entries(target: ModelInfo, hub: Hub, gguf: bool, room: int | None,
                limit: int = HUB_CHECKED) -> list[Found]:
    """Smaller models of the target's family by the target's publisher, on the Hub."""
    ref = parse_ref(target.ref) if target.ref.startswith("hf:") else None
    if ref is None:
        return []
    author, name = ref.name.split("/")
    big = target.params_b or size_label(name) or target.size_bytes / 1e9
    found = []
    for repo in hub.search(author, family_word(ref.name)):
        params = size_label(repo.split("/")[1])
        if repo == ref.name or params is None or params > big * HUB_MAX_RATIO:
            continue
        if gguf != repo.upper().endswith("GGUF"):
            continue
        found.append((params, repo))
    out = []
    for params, repo in sorted(found, reverse=True)[:limit]:
        quant = draft_quant(hub, repo, params, room) if gguf else None
        if gguf and quant is None:
            continue
        out.append(Found(f"hf:{repo}" + (f":{quant}" if quant else ""), None, "hub"))
    return out


def draft_quant(hub: Hub, repo: str, params: float, room: int | None) -> str | None:
    """Q8_0 for a small draft (acceptance matters more than its size), Q4_K_M above 3B, any
    quantisation that fits the memory left."""
    try:
        quants = hub.repo(repo).quants()
    except SpecctlError:
        return None
    prefer = ["Q8_0", "Q6_K", "Q4_K_M"] if params <= 3 else ["Q4_K_M", "Q5_K_M", "Q8_0"]
    order = [q for q in prefer if q in quants] + sorted(set(quants) - set(prefer))
    for quant in order:
        size = sum(f.size for f in quants[quant])
        if room is None or size <= room:
            return quant
    return None


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def trained_for(target: ModelInfo, head_ref: str) -> bool:
    """Whether a head's repo name names the target: its family and version, and its size
    ('yuhuili/EAGLE3-LLaMA3.1-Instruct-8B' for 'meta-llama/Llama-3.1-8B-Instruct')."""
    ref = parse_ref(target.ref) if target.ref.startswith("hf:") else None
    name = (ref.name.split("/")[1] if ref else target.name).removeprefix("Meta-")
    size = _SIZE.search(name.replace("_", "-"))
    if size is None:
        return False
    family = _key(name[:size.start()])
    head = _key(head_ref.split("/")[-1].split(":")[0])
    return bool(family) and family in head and _key(size.group(0)) in head


def hub_heads(target: ModelInfo, hub: Hub, methods: frozenset[str] = frozenset({"eagle3"}),
              gguf: bool = False, limit: int = HUB_CHECKED) -> list[Found]:
    """EAGLE-3 and DFlash heads published for the target, by anyone (the Hub's search, then
    the name): GGUF repos for a GGUF backend (llama.cpp), safetensors ones otherwise."""
    out = []
    for kind in (k for k in HEAD_KINDS if k in methods):
        for repo in hub.search("", kind):
            if not trained_for(target, repo) or gguf != repo.upper().endswith("GGUF"):
                continue
            quant = draft_quant(hub, repo, 1.0, None) if gguf else None
            if gguf and quant is None:
                continue
            out.append(Found(f"hf:{repo}" + (f":{quant}" if quant else ""), None, "hub"))
    return out[:limit]


def sidecars(target: ModelInfo, hub: Hub, methods: frozenset[str]) -> list[Found]:
    """llama.cpp sidecar files in the target's own repo (`mtp-*.gguf`, `dflash-*.gguf`, ...):
    published with the target, so trained for it; llama-server finds them itself (`-hfd`)."""
    ref = parse_ref(target.ref) if target.ref.startswith("hf:") else None
    if ref is None:
        return []
    try:
        found = hub.repo(ref.name).sidecars()
    except SpecctlError:
        return []
    return [Found(f"hf:{ref.name}:{kind.upper()}", None, "sidecar") for kind in found
            if kind in methods]


def draftless(target: ModelInfo, methods: frozenset[str]) -> list[Candidate]:
    """Methods without a draft model: the target's own MTP heads, n-gram prompt lookup."""
    out = []
    if target.kind == "mtp" and target.spec_heads and "mtp" in methods:
        where = ("GGUF nextn_predict_layers" if target.source != "catalog" and not (
            target.meta_file and target.meta_file.is_dir()) and not (
            target.path and target.path.is_dir()) else "config.json num_nextn_predict_layers")
        score = mtp_score(target)
        out.append(Candidate("mtp", f"{target.name} MTP heads", None, "target", True,
                             f"the target's own {target.spec_heads} MTP layer(s) ({where}): no "
                             f"draft model to load; predicted {score:.2f}x", score, "mtp"))
    if target.kind == "medusa" and target.spec_heads and "medusa" in methods:
        out.append(Candidate("medusa", f"{target.name} Medusa heads", None, "target", True,
                             f"the target's own {target.spec_heads} Medusa heads", 1.5,
                             "medusa"))
    if "ngram" in methods:
        out.append(Candidate("ngram", "n-gram prompt lookup", None, "built-in", True,
                             "no draft model: drafts by copying from the prompt; pays where "
                             "outputs repeat it (code edits, summaries); `specctl tune` "
                             "measures it", NGRAM_SCORE, "ngram"))
    return out


def mtp_score(target: ModelInfo) -> float:
    """An MTP layer costs about one of the target's layers per drafted token, and was trained
    with the model (acceptance ALPHA_MTP)."""
    c = 1 / max(target.layers, 1)
    return costmodel.best(costmodel.curve(ALPHA_MTP, c, MTP_SCORE_K)).speedup


def _head_score(target: ModelInfo, head: ModelInfo) -> float:
    """A head trained on the target's hidden states accepts like MTP (ALPHA_MTP) at the cost
    of its size; without sizes, the usual speedup of its kind."""
    if not head.size_bytes or not target.size_bytes:
        return HEAD_SCORE.get(head.kind, 2.5)
    ratio = head.size_bytes / target.size_bytes
    return costmodel.best(costmodel.curve(ALPHA_MTP, ratio, 8)).speedup


@dataclass(frozen=True)
class Prediction:
    """The cost model's estimate for a draft model on a target, before `tune` measures: the one
    figure `plan` (its k) and `drafts` (its ranking) both say."""

    k: int
    speedup: float
    alpha: float  # acceptance assumed: by family until measured
    cost: float  # draft/target cost per token: the weights ratio (x the target's speed)


def predict(target: ModelInfo, draft: ModelInfo, speed: float = 1.0) -> Prediction:
    """Decode is memory-bound: a step costs about the bytes it reads, so the draft's cost is
    the weights ratio, and more where the target is slower (part of it in system RAM)."""
    alpha = ALPHA_SAME_FAMILY if draft.family == target.family else ALPHA_OTHER
    cost = draft.size_bytes * speed / max(target.size_bytes, 1)
    best = costmodel.best(costmodel.curve(alpha, cost, MAX_PREDICTED_K))
    return Prediction(best.k, best.speedup, alpha, cost)


def _score(target: ModelInfo, draft: ModelInfo) -> float:
    return predict(target, draft).speedup


Rule = Callable[[ModelInfo, ModelInfo], str | None]  # (target, draft) -> why not, or None


HEAD_SCORE = {"eagle3": 2.5, "dflash": 2.8, "dspark": 2.9}
HEAD_NAME = {"eagle3": "EAGLE-3 head", "dflash": "DFlash head", "dspark": "DSpark head",
             "mtp": "MTP sidecar"}


def judge(target: ModelInfo, draft: ModelInfo, found: Found, rule: Rule,
          heads: bool | frozenset[str]) -> Candidate:
    """`rule` is the backend's compatibility rule; `heads`: the head methods the backend has
    (True: eagle3, as Hugging Face heads)."""
    def cand(ok: bool, reason: str, score: float = 0.0, method: Method = "draft") -> Candidate:
        return Candidate(found.ref, draft.name, found.path, found.source, ok, reason,
                         score, method)

    has = frozenset({"eagle3"}) if heads is True else heads or frozenset()
    if found.source == "sidecar" or draft.kind in HEAD_SCORE:
        kind = draft.kind if draft.kind in HEAD_NAME else "mtp"
        what = HEAD_NAME[kind]
        method: Method = kind  # type: ignore[assignment]  # one of HEAD_NAME's, all methods
        if method not in has:
            return cand(False, f"{what}: this backend has no {kind} speculation")
        if found.source == "sidecar":
            score = mtp_score(target) if kind == "mtp" else HEAD_SCORE[kind]
            return cand(True, f"{what} in the target's own repo (the engine finds it "
                              f"there): predicted {score:.2f}x", score, method)
        wanted = EAGLE3_FOR.get(draft.name)
        if wanted != target.name and not (wanted is None and trained_for(target, found.ref)):
            return cand(False, f"{what} trained for {wanted or 'another model'}, not "
                               f"{target.name}")
        score = _head_score(target, draft)
        return cand(True, f"{what} trained for {target.name}: predicted {score:.2f}x", score,
                    method)
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


Describe = Callable[[str], ModelInfo]  # a reference not on disk -> its metadata (Hub, catalog)


def rank(target: ModelInfo, candidates: Iterable[Found], rule: Rule,
         heads: bool | frozenset[str],
         backend_quant: str, describe: Describe | None = None,
         room: int | None = None,
         formats: frozenset[str] = frozenset({"gguf", "hf"}),
         remembered: Remembered | None = None) -> list[Candidate]:
    """Judge every candidate (on-disk ones first, then the Hub's, so catalog duplicates are
    dropped); one larger than the memory left after the target is rejected with the numbers."""
    out: list[Candidate] = []
    seen: set[str] = set()
    candidates = sorted(candidates, key=lambda f: (f.path is None, f.source == "catalog"))
    target_file = _real(target.path) if target.path else None
    for found in candidates:
        if found.path is not None and _real(found.path) == target_file:
            continue
        kind = "hf" if found.path is not None and _is_dir(found.path) else "gguf"
        if found.path is not None and kind not in formats:
            what = "a model folder" if kind == "hf" else "a GGUF file"
            out.append(Candidate(found.ref, found.path.name, found.path, found.source, False,
                                 f"{what}: this backend serves {' or '.join(sorted(formats))}",
                                 0.0))
            continue
        try:
            if found.path is not None and kind == "hf":
                draft = from_hf_dir(found.path, found.ref)
            elif found.path is not None:
                draft = from_gguf(found.path, found.ref, remembered)
            elif describe is not None and found.source in ("hub", "sidecar"):
                draft = describe(found.ref)
            else:
                info = from_catalog(parse_ref(found.ref), backend_quant)
                if info is None:
                    continue
                draft = info
            name = canonical(draft)
            if found.path is None and (name in seen or name == canonical(target)):
                continue  # a catalog entry for a model already on disk, or the target itself
            seen.add(name)
            judged = _fits(judge(target, draft, found, rule, heads), draft, room)
        except SpecctlError as exc:  # a model file or Hub answer that cannot be read
            why = UNREAD if found.path is None else "unreadable: "
            out.append(Candidate(found.ref, found.ref, found.path, found.source, False,
                                 f"{why}{exc}", 0.0))
            continue
        out.append(judged)
    return _ranked(out)


def _ranked(candidates: Iterable[Candidate]) -> list[Candidate]:
    return sorted(candidates, key=lambda c: (c.compatible, c.score, c.path is not None),
                  reverse=True)


def _fits(judged: Candidate, draft: ModelInfo, room: int | None) -> Candidate:
    """A compatible candidate larger than the memory left after the target is rejected with the
    numbers."""
    if judged.compatible and room is not None and draft.size_bytes > room:
        return replace(judged, compatible=False, score=0.0,
                       reason=f"{gib(draft.size_bytes)} does not fit the {gib(max(room, 0))} "
                              "left after the target")
    return judged



Requant = Callable[[str], "str | None"]  # a catalog ref -> the same repo at the quant it has


def confirm(target: ModelInfo, ranked: list[Candidate], describe: Describe, rule: Rule,
            heads: bool | frozenset[str], room: int | None = None,
            requant: Requant | None = None) -> list[Candidate]:
    """The catalog's candidates are judged on the catalog's facts; the one that would be picked
    is then read from the Hub (`describe`) and judged again on what the Hub says. A repo without
    the catalog's quantisation (a mirror, a renamed file) is taken at the best one it has that
    fits (`requant`: the rule Hub search uses); one the Hub cannot give at all (renamed,
    deleted, gated) becomes one rejection with the Hub's reason, and the next best is tried:
    one bad candidate never fails the whole ranking."""
    out, asked = list(ranked), set()
    while (top := best(out)) is not None and top.source == "catalog" and top.model not in asked:
        asked.add(top.model)
        try:
            judged = _read(target, top.model, describe, rule, heads, room)
        except SpecctlError as exc:
            other = requant(top.model) if requant is not None else None
            judged = replace(top, compatible=False, score=0.0, reason=f"{UNREAD}{exc}")
            if other is not None:
                asked.add(other)
                with contextlib.suppress(SpecctlError):
                    found = _read(target, other, describe, rule, heads, room)
                    judged = replace(found, reason=f"{found.reason}; the repo has no "
                                     f"{top.model.rsplit(':', 1)[-1]} (the catalog's): took "
                                     f"{other.rsplit(':', 1)[-1]}, the best it has that fits")
        out[out.index(top)] = judged
    return _ranked(out)


def _read(target: ModelInfo, ref: str, describe: Describe, rule: Rule,
          heads: bool | frozenset[str], room: int | None) -> Candidate:
    """A catalog candidate judged on what the Hub says of it."""
    draft = describe(ref)
    return _fits(judge(target, draft, Found(ref, None, "catalog"), rule, heads), draft, room)


def _real(path: Path) -> str:
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return str(path)


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def canonical(info: ModelInfo) -> str:
    known = catalog.lookup(info.name) or catalog.lookup(info.ref)
    return known.name if known else info.name


def best_on_disk(ranked: list[Candidate]) -> Candidate | None:
    return next((c for c in ranked if c.compatible and c.path is not None), None)


def best(ranked: list[Candidate], prefer_on_disk: float = 0.05) -> Candidate | None:
    """The best compatible candidate; one on disk wins unless another is clearly better."""
    ok = [c for c in ranked if c.compatible]
    if not ok:
        return None
    top = max(ok, key=lambda c: c.score)
    local = best_on_disk(ranked)
    if local is not None and local.score >= top.score * (1 - prefer_on_disk):
        return local
    return top
