"""From profile + machine + installed backends + models to one frozen, explained Plan, in stages,
each a function of the facts the command gathered, given as data (nothing here calls back up):

1. `choose`: the backend, the target resolved, the context, the method, the memory budget.
   Its `draft_search` says what draft = "auto" needs; the command gathers the candidates
   (planning/search.py, on the folders, caches and Hub it has).
2. `build`: the Plan from that choice and those candidates, k from the cost model or the
   profile. Its `tunable` says whether a saved tune applies; the command looks it up.
3. `finish`: the saved tune applied (or a bad one said and not used), and the last reason.

Each step returns its reasons; the plan's reasons are theirs, in that order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeAlias

from specctl.orchestrator.config.profiles import Profile
from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.hardware import Hardware
from specctl.orchestrator.contract.launch import Installed, is_loopback
from specctl.orchestrator.contract.memory import Budget, MemoryPlan
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.contract.options import Options
from specctl.orchestrator.contract.plan import NGRAMS, WITH_DRAFT, Method, Plan, Step
from specctl.orchestrator.errors import (
    DoesNotFitError,
    IncompatibleDraftError,
    ProfileError,
    SpecctlError,
    StateError,
)
from specctl.orchestrator.models import compat
from specctl.orchestrator.models.catalog import original_repo
from specctl.orchestrator.models.info import GGUF_QUANTS
from specctl.orchestrator.models.resolve import Resolver
from specctl.orchestrator.planning import backends as choosing
from specctl.orchestrator.planning import drafts, memory, search

DEFAULT_K = {"ngram": 4, "eagle": 3, "eagle3": 4, "mtp": 1, "medusa": 4, "dflash": 8,
             "dspark": 8, "ngram-mod": 16, "ngram-map-k": 8, "ngram-map-k4v": 8,
             "ngram-cache": 8}


@dataclass(frozen=True)
class Facts:
    """What a plan is resolved from, gathered before planning: the machine, the backends and what
    probing found of them (None: planning for other machines, nothing probed), the backend
    `bench --backends` measured fastest here (and why), and the resolver (a model reference's
    metadata, read from its file, a cache or the Hub)."""

    hardware: Hardware
    backends: Mapping[str, Adapter]
    probed: Mapping[str, Installed | None] | None
    resolver: Resolver
    measured: tuple[str, str] | None = None


class TunedResult(Protocol):
    """What the planner reads of a saved `specctl tune` result (measure/results/tuned.Result is
    one)."""

    @property
    def method(self) -> Method: ...
    @property
    def k(self) -> int: ...
    @property
    def p_min(self) -> float | None: ...
    @property
    def summary(self) -> str: ...
    @property
    def k_by_batch(self) -> Sequence[tuple[int, int, int]]: ...
    @property
    def steps(self) -> tuple[Step, ...]: ...  # the methods chained after `method`
    @property
    def serves(self) -> bool: ...  # surely faster: else served without a draft
    @property
    def state(self) -> str: ...  # "settled", or "provisional": the budget ran out first


# what the lookup of a saved tune found: one, none, or a bad one set aside (said, not used)
Saved: TypeAlias = "TunedResult | StateError | None"


@dataclass(frozen=True)
class Chosen:
    """Stage 1: the backend chosen and its options, the target resolved (one it can serve), the
    context and the method to plan, the memory budget (computed once); the reasons so far."""

    profile: Profile
    facts: Facts
    choice: choosing.Choice
    options: Options
    target: ModelInfo
    context: int
    method: Method
    budget: Budget
    reasons: tuple[str, ...]
    notices: tuple[str, ...]

    @property
    def backend(self) -> Adapter:
        return self.facts.backends[self.choice.name]

    @property
    def installed(self) -> Installed:
        return self.choice.installed

    @property
    def draft_search(self) -> search.Search | None:
        """What draft = "auto" needs gathered: the draft candidates for the target on this
        backend (for a head method, heads of that method only) that fit the room left."""
        if self.method not in WITH_DRAFT or _draft_of(self.profile, self.options) != "auto":
            return None
        methods = self.installed.methods if self.method == "draft" else (
            self.installed.methods & {self.method})
        return search.Search(self.target, self.backend, methods,
                             _room(self.budget, self.backend, self.target))


@dataclass(frozen=True)
class Built:
    """Stage 2: the plan before a saved tune, its reasons so far, and why its k."""

    profile: Profile
    plan: Plan
    installed: Installed
    reasons: tuple[str, ...]
    why: str

    @property
    def tunable(self) -> bool:
        """Whether a saved `specctl tune` result applies: k = "auto", speculation on."""
        return self.profile.k == "auto" and self.plan.method != "none"


@dataclass(frozen=True)
class _Drafted:
    method: Method
    draft: ModelInfo | None
    reasons: tuple[str, ...] = ()


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
    reason = backend.draft_problem(options, target, draft, compat.vocab)
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
    slower = "" if pick.speedup > 1 else ("; by these assumptions slower than without a draft: "
                                          "a smaller draft or draft = \"none\" would do better")
    how = ("weights ratio" if speed >= 1 else
           f"weights ratio x {speed:.2f}, the target's speed with part of it in system RAM")
    # no speedup quoted: an assumed acceptance is no measurement (cpu-demo's first `up` said
    # "predicted 1.97x" where tune then measured 1.18x on code and a loss elsewhere: issue 59)
    return pick.k, (f"k={pick.k} from the cost model on assumptions, not measured here: "
                    f"acceptance {pick.alpha}, draft/target cost {pick.cost:.2f} ({how})"
                    f"{slower}; no speedup is claimed until `specctl tune` measures both here")


def _draft(chosen: Chosen, ranked: Sequence[drafts.Candidate] | None) -> _Drafted:
    """The draft: the one the profile names, or draft = "auto"'s pick from `ranked` (a head
    method's pick must be a head of that method), resolved and checked."""
    c, method = chosen, chosen.method
    if method not in WITH_DRAFT:
        return _Drafted(method, None)
    ref: str | None = _draft_of(c.profile, c.options)
    said: list[str] = []
    if c.draft_search is not None:
        if ranked is None:
            raise ProfileError("draft = \"auto\" needs the draft candidates gathered; name a "
                               "draft model instead")
        pick = search.pick(c.target, c.backend.name, list(ranked))
        if method != "draft" and (pick.method != method or pick.ref is None):
            raise ProfileError(f"draft = \"auto\" with draft_method = \"{method}\": no {method} "
                               f"head for {c.target.name} was found on disk or on the Hub; name "
                               "one (draft = \"hf:ORG/REPO\") or set draft_method = \"draft\"")
        said.append(pick.why)
        ref, method = pick.ref, pick.method
    if ref is None:
        return _Drafted(method, None, tuple(said))
    draft = c.facts.resolver.resolve(ref, c.backend.default_quant)
    if draft.note:
        said.append(draft.note + ".")
    if method == "draft":
        said.append(_check_draft(c.backend, c.options, c.target, draft))
    return _Drafted(method, draft, tuple(said))


def is_gguf(info: ModelInfo) -> bool:
    """A GGUF file, on disk, on the Hub, or named by a GGUF repo and quantisation."""
    if info.path is not None:
        return info.path.suffix.lower() == ".gguf"
    if info.remote is not None:
        return info.remote.gguf
    name = info.ref.removeprefix("hf:").split(":")[0]
    return name.upper().endswith("GGUF") or (info.quant or "") in GGUF_QUANTS


def _servable(target: ModelInfo, backend: Adapter,
              resolver: Resolver) -> tuple[ModelInfo, list[str]]:
    """A GGUF target for a backend that cannot load GGUF: its original repo when the Hub's model
    card names it (base_model), else a refusal naming the repo to use."""
    if "gguf" in backend.formats or not is_gguf(target):
        return target, []
    base = target.remote.base_model if target.remote else None
    if base is not None:
        original = resolver.resolve(f"hf:{base}", backend.default_quant)
        return original, [f"Target: {target.ref} is a GGUF, which {backend.name} cannot load; "
                          f"planned on hf:{base}, the original its model card names "
                          "(base_model)."]
    named = original_repo(target.name) or original_repo(target.ref)
    instead = f"hf:{named}" if named else "the Hugging Face repo it was converted from"
    raise ProfileError(f"{target.ref} is a GGUF file, which {backend.name} cannot load; use "
                       f"{instead} as the target (or [{backend.name}] target = ...), or a "
                       "backend that serves GGUF")


def _chain(profile: Profile, method: Method,
           installed: Installed) -> tuple[tuple[Step, ...], list[str]]:
    """The profile's `speculative.chain`, where this build takes several methods at once."""
    wanted = [m for m in profile.speculative.chain if m != method]
    if not wanted or method == "none":
        return (), []
    if not installed.chains:
        return (), [f"Chain {' + '.join(wanted)} left out: {installed.describe()} takes one "
                    "speculation method at a time."]
    missing = [m for m in wanted if m not in installed.methods]
    said = [f"Chain {' + '.join(missing)} left out: {installed.describe()} has no such "
            "method."] if missing else []
    return tuple(Step(m, DEFAULT_K[m]) for m in dict.fromkeys(wanted) if m not in missing), said


def _budget(chosen: Chosen, budget: Budget, options: Options,
            draft: ModelInfo | None) -> tuple[Budget, Options, list[str]]:
    """The memory budget (this machine's devices, `budget`, plus what the backend adds, e.g.
    remote workers), after the backend's own rules for the plan; the options as filled in."""
    backend, hw = chosen.backend, chosen.facts.hardware
    more = backend.resources(options, chosen.installed, hw, budget)
    if more.extra_bytes:
        budget = replace(budget, limit=budget.limit + more.extra_bytes, why=more.why)
    options = more.options or options
    return budget, options, [*more.notes, *backend.check(options, hw, chosen.target, draft)]


def _room(budget: Budget, backend: Adapter, target: ModelInfo) -> int:
    """Bytes a draft may take on the devices: what the target leaves, or, where the backend can
    move target layers to system RAM, up to the whole device budget (the draft displaces them)."""
    left = budget.limit - target.size_bytes
    if backend.spills and budget.host > 0:
        return min(budget.limit, budget.limit + budget.host - target.size_bytes)
    return left


def _fit(chosen: Chosen, draft: ModelInfo | None) -> tuple[MemoryPlan, Options, list[str]]:
    """The memory plan, on the devices the options name (the budget computed once for them);
    when it does not fit, on the wider layouts the backend infers (e.g. vLLM's tensor
    parallelism, each its own budget), before a refusal."""
    profile, hw, backend, options = chosen.profile, chosen.facts.hardware, chosen.backend, \
        chosen.options
    tries = [(options, ""), *backend.wider(options, hw, chosen.target)]
    refusal: SpecctlError | None = None
    for opts, why in tries:
        devices = chosen.budget if opts is options else memory.budget_for(
            hw, profile.memory, backend.devices(opts))
        try:
            devices, opts, said = _budget(chosen, devices, opts, draft)
        except SpecctlError as exc:
            raise type(exc)(f"{profile.name}: {exc}") from None
        try:
            mem, notes = memory.plan(chosen.target, draft, chosen.context, profile.memory,
                                     devices, backend.cache_types, backend.spills,
                                     _slots(profile, backend) if backend.kv_per_slot else (1,))
        except DoesNotFitError as exc:
            refusal = refusal or exc  # the first refusal: the profile's own layout
            continue
        return mem, opts, [*([why] if why else []), *said, *notes]
    assert refusal is not None
    tried = "" if len(tries) == 1 else (
        f" (nor on {', '.join(str(backend.devices(o)) for o, _ in tries[1:])} GPUs)")
    raise DoesNotFitError(f"{profile.name} on {hw.name}: {refusal}{tried}") from None


def _slots(profile: Profile, backend: Adapter) -> tuple[int, ...]:
    """The slot counts to plan, most first: the profile's, or for "auto" the engine's own
    default, then halves of it down to one (memory.plan takes the first that fits)."""
    asked = profile.server.parallel
    if asked != "auto":
        return (asked,)
    n, out = max(backend.default_slots, 1), []
    while n >= 1:
        out.append(n)
        n //= 2
    return tuple(out)


def _slots_said(profile: Profile, backend: Adapter, mem: MemoryPlan, slots: int) -> str:
    asked = profile.server.parallel
    whose = (f"{backend.name}'s own default for parallel = \"auto\"" if asked == "auto"
             and slots == backend.default_slots else "as many as memory holds of "
             f"{backend.name}'s {backend.default_slots}" if asked == "auto" else "the profile's")
    each = f", each up to {mem.context} tokens" if backend.kv_per_slot else ""
    return f"Slots: {slots} concurrent requests ({whose}){each}."


def _context(profile: Profile, target: ModelInfo) -> tuple[int, list[str]]:
    """The context to plan: the profile's (or --ctx), refused beyond what the target was
    trained for when it was asked for, and held to it, said (a reason and a notice), when it
    is the default."""
    asked, trained = profile.server.context, target.context
    if not trained or asked <= trained:
        return asked, []
    if "context" in profile.server.model_fields_set:
        raise ProfileError(f"{profile.name}: context {asked} tokens is beyond what "
                           f"{target.name} was trained for ({trained}); set --ctx "
                           f"(server.context) to {trained} or less")
    return trained, [f"Context {trained} tokens, not the default {asked}: {target.name} was "
                     f"trained for {trained}."]


def _available(method: Method, installed: Installed, backend: Adapter) -> tuple[Method, list[str]]:
    """The method, or none where this build has no such speculation (said)."""
    if method in installed.methods:
        return method, []
    return "none", [f"Speculation unavailable: {installed.describe()} has no '{method}' "
                    f"speculation, so it serves without; {backend.no_spec_hint}."]


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


def _with_tuned(plan: Plan, found: TunedResult) -> tuple[Plan, str]:
    """The plan with `tune`'s saved setting, or without a draft when the setting is not surely
    faster; and why."""
    if found.method != "none" and not found.serves:
        return plan.but(method="none", k=0, draft=None, chain=(), k_source="tuned"), (
            f"`specctl tune` ({found.state}) found {found.summary.split('; ', 1)[0]}, not "
            "surely faster than without a draft (its interval must be above 1.00x and its "
            "point 5% over): serving without one; `specctl tune` with a longer --budget may "
            "show it pays")
    p_min = found.p_min if found.p_min is not None else plan.p_min
    return plan.but(method=found.method, k=found.k, p_min=p_min,
                    draft=plan.draft if found.method == "draft" else None, k_source="tuned",
                    k_by_batch=tuple(found.k_by_batch), chain=found.steps), \
        f"`specctl tune` on this machine: {found.summary}"


def choose(profile: Profile, facts: Facts) -> Chosen:
    """Stage 1: the backend, the target it serves, the context, the method, the budget."""
    choice = choosing.choose(list(profile.backend), facts.hardware, facts.backends,
                             facts.probed, facts.measured)
    backend = facts.backends[choice.name]
    _check_host(profile, backend)
    options = profile.section(choice.name)
    target = facts.resolver.resolve(options.target or profile.target, backend.default_quant)
    noted = [target.note + "."] if target.note else []
    target, servable = _servable(target, backend, facts.resolver)
    context, held = _context(profile, target)
    method, unavailable = _available(_method(profile, options), choice.installed, backend)
    budget = memory.budget_for(facts.hardware, profile.memory, backend.devices(options))  # once
    return Chosen(profile, facts, choice, options, target, context, method, budget,
                  (*choice.reasons, *noted, *servable, *held, *unavailable), tuple(held))


def build(chosen: Chosen, ranked: Sequence[drafts.Candidate] | None = None) -> Built:
    """Stage 2: the plan from the choice and, for draft = "auto", the ranked candidates of
    `chosen.draft_search` (planning/search.py); k from the cost model or the profile."""
    c, profile, srv, hw = chosen, chosen.profile, chosen.profile.server, chosen.facts.hardware
    drafted = _draft(c, ranked)
    method, draft = drafted.method, drafted.draft
    mem, options, fitted = _fit(c, draft)
    if profile.k == "auto":
        k, why = _auto_k(method, c.target, draft, mem.speed)
        k_source = "cost model"
    else:
        k, why, k_source = profile.k, f"k={profile.k} from the profile", "profile"
    chain, chained = _chain(profile, method, c.installed)
    slots = mem.slots if c.backend.kv_per_slot else _slots(profile, c.backend)[0]
    plan = Plan(
        profile=profile.name, backend=c.choice.name, hardware=hw, target=c.target, draft=draft,
        method=method, k=0 if method == "none" else k, k_source=k_source, memory=mem,
        host=srv.host, port=srv.port, threads=srv.threads or (hw.cpu.cores
                                                              if hw.kind == "cpu" else None),
        parallel=slots, gpu_utilization=profile.memory.gpu_utilization,
        p_min=profile.speculative.p_min, ngram_min=profile.speculative.ngram_min,
        ngram_max=profile.speculative.ngram_max, api_key_env=srv.api_key_env, options=options,
        chain=chain, extra_args=tuple(profile.extra_args),
        notices=(*c.notices, *_changed(c.context, profile, c.backend, mem)),
    )
    return Built(profile, plan, c.installed, (*c.reasons, *drafted.reasons, *fitted,
                                              _slots_said(profile, c.backend, mem, slots),
                                              *chained), why)


def finish(built: Built, saved: Saved = None) -> Plan:
    """Stage 3: the plan with its saved tune applied when `built.tunable` (one set aside is said,
    not used), and the last reason: the speculation and why."""
    plan, why, said = built.plan, built.why, list[str]()
    found = saved if built.tunable else None
    if isinstance(found, StateError):
        said.append(f"Tuned result ignored: {found}")
    elif found is not None:
        plan, why = _with_tuned(plan, found)
    if _draft_of(built.profile, plan.options) == "none":
        why = "draft = \"none\""
    elif built.plan.method == "none":
        why = "see above"
    said.append(f"Speculation: {plan.describe_spec()}; {why}." if plan.speculative
                else f"Speculation off: {why}.")
    return plan.but(reasons=(*built.reasons, *said))
