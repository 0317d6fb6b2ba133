"""planner.resolve(): profile + hardware + installed backends + models -> an explained Plan."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from specctl.adapters.base import Adapter
from specctl.orchestrator.config.profiles import Profile
from specctl.orchestrator.contract.launch import Installed, is_loopback
from specctl.orchestrator.contract.memory import Budget, MemoryPlan
from specctl.orchestrator.contract.options import Options
from specctl.orchestrator.errors import (
    DoesNotFitError,
    IncompatibleDraftError,
    ProfileError,
    SpecctlError,
    StateError,
)
from specctl.orchestrator.machine.hardware import Hardware
from specctl.orchestrator.models.catalog import original_repo
from specctl.orchestrator.models.info import GGUF_QUANTS, ModelInfo
from specctl.orchestrator.models.resolve import Resolver
from specctl.orchestrator.planning import backends as choosing
from specctl.orchestrator.planning import drafts, memory
from specctl.orchestrator.planning.plan import NGRAMS, WITH_DRAFT, Method, Plan, Step
from specctl.orchestrator.planning.search import Pick

DEFAULT_K = {"ngram": 4, "eagle": 3, "eagle3": 4, "mtp": 1, "medusa": 4, "dflash": 8,
             "dspark": 8, "ngram-mod": 16, "ngram-map-k": 8, "ngram-map-k4v": 8,
             "ngram-cache": 8}


@dataclass(frozen=True)
class Tuned:
    """What `specctl tune` found for this machine and these models."""

    method: Method
    k: int
    p_min: float | None
    speedup: float
    summary: str
    k_by_batch: tuple[tuple[int, int, int], ...] = ()
    chain: tuple[Step, ...] = ()
    served: bool = True  # surely faster (measure.tuned.Result.serves): else served without
    state: str = "settled"  # or "provisional": the budget ran out before the precision


TunedLookup = Callable[[Plan, Installed], Tuned | None]


# (target, backend, its speculation methods, bytes left after the target or None) -> Pick
DraftPicker = Callable[[ModelInfo, Adapter, frozenset[str], int | None], Pick]


def no_auto_draft(target: ModelInfo, backend: Adapter, methods: frozenset[str],
                  room: int | None) -> Pick:
    raise ProfileError("draft = \"auto\" needs a draft picker; name a draft model instead")


def _draft_of(profile: Profile, options: Options) -> str:
    """The draft the profile names for this backend: its section's `draft`, else the top's."""
    return options.draft or profile.draft


def _method(profile: Profile, options: Options) -> Method:
    draft = _draft_of(profile, options)
    if draft == "none":
        return "none"
    if draft in NGRAMS:
        return draft  # type: ignore[return-value]  # one of Method's n-gram names
    return profile.draft_method


def _same_model(target: ModelInfo, draft: ModelInfo) -> bool:
    if target.path is not None and draft.path is not None:
        return target.path.resolve() == draft.path.resolve()
    return target.ref == draft.ref or (target.name, target.quant, target.size_bytes) == (
        draft.name, draft.quant, draft.size_bytes)


def _check_draft(backend: Adapter, options: Options, target: ModelInfo, draft: ModelInfo) -> str:
    reason = backend.draft_problem(options, target, draft)
    if reason is not None:
        raise IncompatibleDraftError(
            f"draft {draft.name} cannot speculate for {target.name} on {backend.name}: {reason}; "
            "pick a draft of the same model family (`specctl drafts MODEL`)")
    def read(m: ModelInfo) -> bool:
        where = m.path or m.meta_file
        return where is not None and where.exists()

    how = "token lists compared" if read(target) and read(draft) else "catalog tokenizers"
    if _same_model(target, draft):  # valid (tests use it), never faster: said, not hidden
        return (f"Draft {draft.name} is the target itself: each drafted token costs a full "
                "target step, so this is slower than without a draft (a smoke test at best); "
                "pick a smaller model of the same family (`specctl drafts MODEL`).")
    return f"Draft {draft.name} is compatible with {target.name} ({backend.vocab_rule} vocab " \
           f"rule, {how})."


def _auto_k(method: Method, target: ModelInfo, draft: ModelInfo | None,
            speed: float = 1.0) -> tuple[int, str]:
    """k from the cost model. `speed`: the target's decode speed relative to all of it on the
    devices (below 1 when part of it is in system RAM, the draft staying on a GPU)."""
    if method != "draft" or draft is None:
        k = DEFAULT_K.get(method, 4)
        if method in ("medusa", "mtp") and target.spec_heads:
            k = min(k, target.spec_heads)  # no more tokens than the target has heads
        return k, f"k={k}: the usual best for {method}; `specctl tune` measures it here"
    pick = drafts.predict(target, draft, speed)  # the estimate `specctl drafts` ranks by too
    slower = "" if pick.speedup > 1 else (", slower than without a draft: a smaller draft or "
                                          "draft = \"none\" would do better")
    how = ("weights ratio" if speed >= 1 else
           f"weights ratio x {speed:.2f}, the target's speed with part of it in system RAM")
    return pick.k, (f"k={pick.k} from the cost model with assumed acceptance {pick.alpha} and "
                    f"draft/target cost {pick.cost:.2f} ({how}): predicted {pick.speedup:.2f}x"
                    f"{slower}; `specctl tune` measures both here")


def _draft(profile: Profile, method: Method, target: ModelInfo, backend: Adapter,
           installed: Installed, options: Options, resolver: Resolver, pick_draft: DraftPicker,
           room: int, reasons: list[str]) -> tuple[Method, ModelInfo | None]:
    if method not in WITH_DRAFT:
        return method, None
    draft_ref: str | None = _draft_of(profile, options)
    if draft_ref == "auto" and method == "draft":
        pick = pick_draft(target, backend, installed.methods, room)
        reasons.append(pick.why)
        draft_ref, method = pick.ref, pick.method
    elif draft_ref == "auto":  # a head of this method (eagle3, dflash, ...), found for the target
        pick = pick_draft(target, backend, installed.methods & {method}, room)
        if pick.method != method or pick.ref is None:
            raise ProfileError(f"draft = \"auto\" with draft_method = \"{method}\": no {method} "
                               f"head for {target.name} was found on disk or on the Hub; name "
                               "one (draft = \"hf:ORG/REPO\") or set draft_method = \"draft\"")
        reasons.append(pick.why)
        draft_ref = pick.ref
    if draft_ref is None:
        return method, None
    draft = resolver.resolve(draft_ref, backend.default_quant)
    if draft.note:
        reasons.append(draft.note + ".")
    if method == "draft":
        reasons.append(_check_draft(backend, options, target, draft))
    return method, draft


def is_gguf(info: ModelInfo) -> bool:
    """A GGUF file, on disk, on the Hub, or named by a GGUF repo and quantisation."""
    if info.path is not None:
        return info.path.suffix.lower() == ".gguf"
    if info.remote is not None:
        return info.remote.gguf
    name = info.ref.removeprefix("hf:").split(":")[0]
    return name.upper().endswith("GGUF") or (info.quant or "") in GGUF_QUANTS


def _servable(target: ModelInfo, backend: Adapter, resolver: Resolver,
              reasons: list[str]) -> ModelInfo:
    """A GGUF target for a backend that cannot load GGUF: its original repo when the Hub's model
    card names it (base_model), else a refusal naming the repo to use."""
    if "gguf" in backend.formats or not is_gguf(target):
        return target
    base = target.remote.base_model if target.remote else None
    if base is not None:
        original = resolver.resolve(f"hf:{base}", backend.default_quant)
        reasons.append(f"Target: {target.ref} is a GGUF, which {backend.name} cannot load; "
                       f"planned on hf:{base}, the original its model card names (base_model).")
        return original
    named = original_repo(target.name) or original_repo(target.ref)
    instead = f"hf:{named}" if named else "the Hugging Face repo it was converted from"
    raise ProfileError(f"{target.ref} is a GGUF file, which {backend.name} cannot load; use "
                       f"{instead} as the target (or [{backend.name}] target = ...), or a "
                       "backend that serves GGUF")


def _chain(profile: Profile, method: Method, installed: Installed,
           reasons: list[str]) -> tuple[Step, ...]:
    """The profile's `speculative.chain`, where this build takes several methods at once."""
    wanted = [m for m in profile.speculative.chain if m != method]
    if not wanted or method == "none":
        return ()
    if not installed.chains:
        reasons.append(f"Chain {' + '.join(wanted)} left out: {installed.describe()} takes one "
                       "speculation method at a time.")
        return ()
    missing = [m for m in wanted if m not in installed.methods]
    if missing:
        reasons.append(f"Chain {' + '.join(missing)} left out: {installed.describe()} has no "
                       "such method.")
    return tuple(Step(m, DEFAULT_K[m]) for m in dict.fromkeys(wanted) if m not in missing)


def _budget(budget: Budget, hw: Hardware, backend: Adapter, options: Options,
            installed: Installed, target: ModelInfo, draft: ModelInfo | None,
            reasons: list[str]) -> tuple[Budget, Options]:
    """The memory budget (this machine's devices, `budget`, plus what the backend adds, e.g.
    remote workers), after the backend's own rules for the plan; the options as filled in."""
    more = backend.resources(options, installed, hw, budget)
    if more.extra_bytes:
        budget = replace(budget, limit=budget.limit + more.extra_bytes, why=more.why)
    reasons += more.notes
    options = more.options or options
    reasons += backend.check(options, hw, target, draft)
    return budget, options


def _room(budget: Budget, backend: Adapter, target: ModelInfo) -> int:
    """Bytes a draft may take on the devices: what the target leaves, or, where the backend can
    move target layers to system RAM, up to the whole device budget (the draft displaces them)."""
    left = budget.limit - target.size_bytes
    if backend.spills and budget.host > 0:
        return min(budget.limit, budget.limit + budget.host - target.size_bytes)
    return left


def _fit(profile: Profile, hw: Hardware, backend: Adapter, options: Options,
         installed: Installed, target: ModelInfo, draft: ModelInfo | None, budget: Budget,
         context: int, reasons: list[str]) -> tuple[MemoryPlan, Options]:
    """The memory plan, on the devices the options name (`budget`, computed once for them);
    when it does not fit, on the wider layouts the backend infers (e.g. vLLM's tensor
    parallelism, each its own budget), before a refusal."""
    tries = [(options, ""), *backend.wider(options, hw, target)]
    refusal: SpecctlError | None = None
    for opts, why in tries:
        said: list[str] = [why] if why else []
        devices = budget if opts is options else memory.budget_for(hw, profile.memory,
                                                                  backend.devices(opts))
        try:
            devices, opts = _budget(devices, hw, backend, opts, installed, target, draft, said)
        except SpecctlError as exc:
            raise type(exc)(f"{profile.name}: {exc}") from None
        try:
            mem, notes = memory.plan(target, draft, context, profile.memory,
                                     devices, backend.cache_types, backend.spills)
        except DoesNotFitError as exc:
            refusal = refusal or exc  # the first refusal: the profile's own layout
            continue
        reasons += said + notes
        return mem, opts
    assert refusal is not None
    tried = "" if len(tries) == 1 else (
        f" (nor on {', '.join(str(backend.devices(o)) for o, _ in tries[1:])} GPUs)")
    raise DoesNotFitError(f"{profile.name} on {hw.name}: {refusal}{tried}") from None


def _context(profile: Profile, target: ModelInfo, reasons: list[str],
             notices: list[str]) -> int:
    """The context to plan: the profile's (or --ctx), refused beyond what the target was
    trained for when it was asked for, and held to it, said, when it is the default."""
    asked, trained = profile.server.context, target.context
    if not trained or asked <= trained:
        return asked
    if "context" in profile.server.model_fields_set:
        raise ProfileError(f"{profile.name}: context {asked} tokens is beyond what "
                           f"{target.name} was trained for ({trained}); set --ctx "
                           f"(server.context) to {trained} or less")
    line = (f"Context {trained} tokens, not the default {asked}: {target.name} was trained for "
            f"{trained}.")
    reasons.append(line)
    notices.append(line)
    return trained


def _changed(asked: int, profile: Profile, backend: Adapter, mem: MemoryPlan) -> list[str]:
    """What fitting memory changed of what was asked (the KV cache's type, the context), as a
    line for the plan's main lines; none when nothing was changed."""
    cache = profile.memory.cache_type
    first_type = cache if cache != "auto" else backend.cache_types[0]
    changes = []
    if mem.cache_type != first_type:
        changes.append(f"KV cache {mem.cache_type}, not {first_type}")
    if mem.context != asked:
        changes.append(f"context {mem.context} tokens, not {asked}")
    if not changes:
        return []
    return [f"{' and '.join(changes)}, to fit the memory budget ({mem.budget.why})."]


def _check_host(profile: Profile, backend: Adapter) -> None:
    """Beyond loopback only with a key, and only on a backend that checks one."""
    host = profile.server.host
    if not is_loopback(host) and backend.authenticates and not profile.server.api_key_env:
        raise ProfileError(f"{profile.name}: server.host = {host} exposes the server beyond "
                           "this machine; set server.api_key_env too, or bind to 127.0.0.1")
    if not is_loopback(host) and not backend.authenticates:
        raise ProfileError(f"{profile.name}: {backend.name} checks no API key, so server.host = "
                           f"{host} would serve anyone who can reach it; bind to 127.0.0.1 "
                           "and put an authenticating proxy in front to share it")


def _with_tuned(plan: Plan, found: Tuned) -> tuple[Plan, str]:
    """The plan with `tune`'s saved setting, or without a draft when the setting is not surely
    faster; and why."""
    if found.method != "none" and not found.served:
        return plan.but(method="none", k=0, draft=None, chain=(), k_source="tuned"), (
            f"`specctl tune` ({found.state}) found {found.summary.split('; ', 1)[0]}, not "
            "surely faster than without a draft (its interval must be above 1.00x and its "
            "point 5% over): serving without one; `specctl tune` with a longer --budget may "
            "show it pays")
    p_min = found.p_min if found.p_min is not None else plan.p_min
    return plan.but(method=found.method, k=found.k, p_min=p_min,
                    draft=plan.draft if found.method == "draft" else None, k_source="tuned",
                    k_by_batch=found.k_by_batch, chain=found.chain), \
        f"`specctl tune` on this machine: {found.summary}"


def resolve(profile: Profile, hw: Hardware, backends: Mapping[str, Adapter],
            probed: Mapping[str, Installed | None] | None, resolver: Resolver,
            tuned: TunedLookup = lambda _p, _i: None,
            pick_draft: DraftPicker = no_auto_draft,
            measured: tuple[str, str] | None = None) -> tuple[Plan, Installed]:
    """The plan and the backend installation it is for. Raises a SpecctlError with what to do."""
    srv = profile.server
    choice = choosing.choose(list(profile.backend), hw, backends, probed, measured)
    backend = backends[choice.name]
    _check_host(profile, backend)
    reasons, notices = list(choice.reasons), list[str]()
    options = profile.section(choice.name)
    target = resolver.resolve(options.target or profile.target, backend.default_quant)
    if target.note:
        reasons.append(target.note + ".")
    target = _servable(target, backend, resolver, reasons)
    context = _context(profile, target, reasons, notices)
    method = _method(profile, options)
    if method not in choice.installed.methods:
        reasons.append(f"Speculation unavailable: {choice.installed.describe()} has no "
                       f"'{method}' speculation, so it serves without; {backend.no_spec_hint}.")
        method = "none"
    budget = memory.budget_for(hw, profile.memory, backend.devices(options))  # once
    method, draft = _draft(profile, method, target, backend, choice.installed, options, resolver,
                           pick_draft, _room(budget, backend, target), reasons)
    mem, options = _fit(profile, hw, backend, options, choice.installed, target, draft, budget,
                        context, reasons)
    notices += _changed(context, profile, backend, mem)
    if profile.k == "auto":
        k, why = _auto_k(method, target, draft, mem.speed)
        k_source = "cost model"
    else:
        k, why, k_source = profile.k, f"k={profile.k} from the profile", "profile"
    plan = Plan(
        profile=profile.name, backend=choice.name, hardware=hw, target=target, draft=draft,
        method=method, k=0 if method == "none" else k, k_source=k_source, memory=mem,
        host=srv.host, port=srv.port, threads=srv.threads or (hw.cpu.cores
                                                              if hw.kind == "cpu" else None),
        parallel=srv.parallel, gpu_utilization=profile.memory.gpu_utilization,
        p_min=profile.speculative.p_min, ngram_min=profile.speculative.ngram_min,
        ngram_max=profile.speculative.ngram_max, api_key_env=srv.api_key_env, options=options,
        chain=_chain(profile, method, choice.installed, reasons),
        extra_args=tuple(profile.extra_args), notices=tuple(notices),
    )
    try:
        found = tuned(plan, choice.installed) if profile.k == "auto" and method != "none" \
            else None
    except StateError as exc:  # a saved result that failed validation: set aside, not used
        found = None
        reasons.append(f"Tuned result ignored: {exc}")
    if found is not None:
        plan, why = _with_tuned(plan, found)
    if _draft_of(profile, options) == "none":
        why = "draft = \"none\""
    elif method == "none":
        why = "see above"
    reasons.append(f"Speculation: {plan.describe_spec()}; {why}." if plan.speculative
                   else f"Speculation off: {why}.")
    return plan.but(reasons=tuple(reasons)), choice.installed
