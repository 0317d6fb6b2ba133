"""planner.resolve(): profile + hardware + installed backends + models -> an explained Plan."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from specctl.adapters.base import Backend, Installed
from specctl.orchestrator.config.profiles import Profile
from specctl.orchestrator.errors import IncompatibleDraftError, ProfileError, SpecctlError
from specctl.orchestrator.machine import cluster
from specctl.orchestrator.machine.hardware import Hardware
from specctl.orchestrator.models import compat
from specctl.orchestrator.models.resolve import ModelInfo, Resolver
from specctl.orchestrator.planning import costmodel, memory
from specctl.orchestrator.planning.backends import choose
from specctl.orchestrator.planning.plan import Method, Plan

ASSUMED_ALPHA = 0.7  # until `specctl tune` measures it
DEFAULT_K = {"ngram": 4, "eagle": 3, "eagle3": 4, "mtp": 1}
MAX_AUTO_K = 8


@dataclass(frozen=True)
class Tuned:
    """What `specctl tune` found for this machine and these models."""

    method: Method
    k: int
    p_min: float | None
    speedup: float
    summary: str


TunedLookup = Callable[[Plan, Installed], Tuned | None]
# Picks a draft for draft = "auto": (target, backend) -> (model reference, why).
DraftPicker = Callable[[ModelInfo, Backend], tuple[str, str]]


def no_auto_draft(target: ModelInfo, backend: Backend) -> tuple[str, str]:
    raise ProfileError("draft = \"auto\" needs a draft picker; name a draft model instead")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _method(profile: Profile) -> Method:
    if profile.draft == "none":
        return "none"
    if profile.draft == "ngram":
        return "ngram"
    return profile.draft_method


def _check_draft(backend: Backend, target: ModelInfo, draft: ModelInfo, hetero: bool) -> str:
    reason = compat.RULES[backend.vocab_rule](target, draft, compat.file_tokens, hetero)
    if reason is not None:
        raise IncompatibleDraftError(
            f"draft {draft.name} cannot speculate for {target.name} on {backend.name}: {reason}; "
            "pick a draft of the same model family (`specctl drafts --target ...`)")
    how = "token lists compared" if target.path and draft.path else "catalog tokenizers"
    return f"Draft {draft.name} is compatible with {target.name} ({backend.vocab_rule} vocab " \
           f"rule, {how})."


def _auto_k(method: Method, target: ModelInfo, draft: ModelInfo | None) -> tuple[int, str]:
    if method != "draft" or draft is None:
        k = DEFAULT_K.get(method, 4)
        return k, f"k={k}: the usual best for {method}; `specctl tune` measures it here"
    c = draft.size_bytes / max(target.size_bytes, 1)  # decode is memory-bound: cost ~ bytes read
    pick = costmodel.best(costmodel.curve(ASSUMED_ALPHA, c, MAX_AUTO_K))
    return pick.k, (f"k={pick.k} from the cost model with assumed acceptance {ASSUMED_ALPHA} and "
                    f"draft/target cost {c:.2f} (weights ratio): predicted {pick.speedup:.2f}x; "
                    "`specctl tune` measures both here")


def _rpc_budget(workers: list[cluster.Worker], local: memory.Budget) -> memory.Budget:
    free = sum(w.free_gb for w in workers)
    each = ", ".join(f"{w.address} {w.free_gb:.1f} GB" for w in workers)
    return memory.Budget(gb=free + local.gb, why=f"{len(workers)} RPC workers ({each} free) + "
                                                 f"this machine {local.gb:.1f} GB")


def _draft(profile: Profile, method: Method, target: ModelInfo, backend: Backend,
           resolver: Resolver, pick_draft: DraftPicker, reasons: list[str]) -> ModelInfo | None:
    if method not in ("draft", "eagle", "eagle3"):
        return None
    draft_ref = profile.draft
    if draft_ref == "auto":
        draft_ref, why_draft = pick_draft(target, backend)
        reasons.append(why_draft)
    draft = resolver.resolve(draft_ref, backend.default_quant)
    if method == "draft":
        reasons.append(_check_draft(backend, target, draft,
                                    profile.speculative.heterogeneous_vocab))
    return draft


def _budget(profile: Profile, hw: Hardware, workers: list[cluster.Worker] | None,
            target: ModelInfo, draft: ModelInfo | None,
            reasons: list[str]) -> tuple[memory.Budget, tuple[float, ...]]:
    """The memory budget (this machine, RPC workers, or the cluster's GPUs) and the RPC split."""
    par = profile.parallel
    budget = memory.budget_for(hw, profile.memory, par.tensor * par.pipeline)
    split: tuple[float, ...] = ()
    if profile.cluster.rpc_workers:
        if not workers:
            raise ProfileError(f"{profile.name}: cannot tell the RPC workers' memory; start them "
                               "(`specctl worker up --port P` on each host) or set "
                               "cluster.worker_memory_gb")
        budget, split = _rpc_budget(workers, budget), cluster.split_by_memory(workers)
        reasons.append(f"RPC: the target's layers are split across {len(workers)} workers by "
                       f"free memory ({', '.join(f'{s:.0%}' for s in split)}); the draft stays "
                       f"{'on this machine' if profile.cluster.draft_local else 'with them'}.")
    if par.tensor * par.pipeline > 1 or par.draft_tensor:
        reasons += cluster.check_vllm_parallel(
            target, draft, par.tensor, par.pipeline, par.draft_tensor, len(hw.gpus) or 1,
            cluster.gpus_per_node(profile.cluster, Path.cwd()) or len(hw.gpus))
    return budget, split


def resolve(profile: Profile, hw: Hardware, backends: Mapping[str, Backend],
            probed: Mapping[str, Installed | None] | None, resolver: Resolver,
            tuned: TunedLookup = lambda _p, _i: None,
            pick_draft: DraftPicker = no_auto_draft,
            workers: list[cluster.Worker] | None = None) -> tuple[Plan, Installed]:
    """The plan and the backend installation it is for. Raises a SpecctlError with what to do."""
    srv = profile.server
    if not _is_loopback(srv.host) and not srv.api_key_env:
        raise ProfileError(f"{profile.name}: server.host = {srv.host} exposes the server beyond "
                           "this machine; set server.api_key_env too, or bind to 127.0.0.1")
    choice = choose(list(profile.backend), hw, backends, probed)
    backend = backends[choice.name]
    reasons = list(choice.reasons)
    target = resolver.resolve(profile.target, backend.default_quant)
    method = _method(profile)
    if method not in choice.installed.methods:
        reasons.append(f"Speculation unavailable: {choice.installed.describe()} has no "
                       f"'{method}' speculation, so it serves without; {backend.no_spec_hint}.")
        method = "none"
    draft = _draft(profile, method, target, backend, resolver, pick_draft, reasons)
    budget, split = _budget(profile, hw, workers, target, draft, reasons)
    try:
        mem, notes = memory.plan(target, draft, srv.context, profile.memory, budget,
                                 backend.cache_types)
    except SpecctlError as exc:
        raise type(exc)(f"{profile.name} on {hw.name}: {exc}") from None
    reasons += notes
    if profile.k == "auto":
        k, why = _auto_k(method, target, draft)
        k_source = "cost model"
    else:
        k, why, k_source = profile.k, f"k={profile.k} from the profile", "profile"
    plan = Plan(
        profile=profile.name, backend=choice.name, hardware=hw, target=target, draft=draft,
        method=method, k=0 if method == "none" else k, k_source=k_source, memory=mem,
        host=srv.host, port=srv.port, threads=srv.threads or (hw.cpu.cores
                                                              if hw.kind == "cpu" else None),
        parallel=srv.parallel,
        gpu_layers=0 if hw.kind == "cpu" and not profile.cluster.rpc_workers else 999,
        gpu_utilization=profile.memory.gpu_utilization, p_min=profile.speculative.p_min,
        n_min=profile.speculative.n_min, ngram_min=profile.speculative.ngram_min,
        ngram_max=profile.speculative.ngram_max, tensor_parallel=profile.parallel.tensor,
        pipeline_parallel=profile.parallel.pipeline,
        draft_tensor_parallel=profile.parallel.draft_tensor,
        heterogeneous_vocab=profile.speculative.heterogeneous_vocab,
        api_key_env=srv.api_key_env, rpc_workers=tuple(profile.cluster.rpc_workers),
        tensor_split=split, draft_local=profile.cluster.draft_local,
        ray_address=profile.cluster.ray_address or ("auto" if len(profile.cluster.nodes) > 1 or
                                                    sum(n.count for n in profile.cluster.nodes)
                                                    > 1 else None),
    )
    found = tuned(plan, choice.installed) if profile.k == "auto" and method != "none" else None
    if found is not None:
        draft_kept = draft if found.method == "draft" else None
        p_min = found.p_min if found.p_min is not None else plan.p_min
        plan = plan.but(method=found.method, k=found.k, p_min=p_min, draft=draft_kept,
                        k_source="tuned")
        why = f"`specctl tune` on this machine: {found.summary}"
    if profile.draft == "none":
        why = "speculation off (draft = \"none\")"
    elif method == "none":
        why = "see above"
    reasons.append(f"Speculation: {plan.describe_spec()}; {why}.")
    return plan.but(reasons=tuple(reasons)), choice.installed
