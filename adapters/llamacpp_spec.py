"""llama.cpp's speculation flags: every `--spec-type` the build lists, one or a chain of them.

A 2026 llama-server takes `--spec-type a,b,...`: at most one type that reads a model (a draft
model, an EAGLE-3 or DFlash head, the target's own MTP layers) and any of the n-gram drafters,
each with its own knobs. The plan's `method` is the first; `plan.chain` the rest (draftless
n-gram methods, each with its own k). Per type, what k means and which knobs go with it:

- draft / eagle3 / dflash / dspark / mtp: `--spec-draft-n-max k` (and n-min, p-min); the
  first four load a file with `-md`/`-hfd`, mtp uses the target's own layers (or a sidecar).
- ngram (ngram-simple), ngram-map-k, ngram-map-k4v: lookup n-gram `size-n` (the profile's
  `speculative.ngram_max`), draft `size-m` = k, `min-hits`.
- ngram-mod: `--spec-ngram-mod-n-max` k, `-n-min` (fewest tokens worth a draft), `-n-match`
  (the lookup length); at k 64 or more, the build's own `--spec-default` knobs (ngram_mod_knobs).
- ngram-cache: no knobs (it drafts up to 8).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from pydantic import Field

from specctl.adapters.llamacpp_dialect import FLAGS, SPEC_TYPE_DIALECT, SPEC_TYPES
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.contract.options import Options
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.errors import BackendError

MODEL_TYPES = frozenset({"draft", "eagle3", "mtp", "dflash", "dspark"})  # one at most
FILE_TYPES = frozenset({"draft", "eagle3", "dflash", "dspark"})  # these need -md / -hfd
SIDECAR_TAGS = frozenset({"MTP", "DFLASH", "DSPARK", "EAGLE3"})  # hf:org/repo:MTP
REMEMBERING = frozenset({"ngram-mod", "ngram-cache"})  # their pools outlive a request
SIZE_TYPES = {"ngram": "simple", "ngram-map-k": "map-k", "ngram-map-k4v": "map-k4v"}


class Argv(Protocol):
    def add(self, flag: str, *values: Any) -> None: ...


class SpecKnobs(Options):
    """The n-gram drafters' own knobs in a profile's `[llamacpp]` section (None: the plan's or
    the build's default)."""

    n_min: int | None = Field(None, ge=0, le=32, strict=True,
                              description="fewest draft tokens per step")
    ngram_mod_n_match: int | None = Field(None, ge=1, le=1024, strict=True,
                                          description="ngram-mod: lookup length (tokens)")
    ngram_mod_n_min: int | None = Field(None, ge=0, le=1024, strict=True,
                                        description="ngram-mod: fewest tokens worth a draft")
    ngram_min_hits: int | None = Field(None, ge=1, le=1024, strict=True,
                                       description="ngram-simple/-map-k/-map-k4v: hits before "
                                       "a lookup drafts")


def check(plan: Plan, methods: frozenset[str], chains: bool, version: str) -> None:
    """The plan's methods are ones this build has, and a chain is one it can run."""
    wanted = plan.methods
    missing = [m for m in wanted if m not in methods]
    if missing:
        raise BackendError(f"llama-server {version} cannot do '{missing[0]}' speculation (it "
                           f"has: {', '.join(sorted(methods))})")
    if plan.chain and not chains:
        raise BackendError(f"llama-server {version} takes one --spec-type at a time, not "
                           f"{plan.short()}; update llama.cpp (`specctl backend install "
                           "llama.cpp --rebuild`)")
    if sum(m in MODEL_TYPES for m in wanted) > 1 or len(set(wanted)) < len(wanted):
        raise BackendError(f"'{plan.short()}': llama.cpp chains one drafting model (draft, "
                           "EAGLE-3, DFlash or MTP) with n-gram methods, each once")


def speculative(a: Argv, plan: Plan, opts: SpecKnobs, dialect: str,
                model: Any, draft_extras: Any) -> None:
    """Add the speculation flags of `plan` to `a`. `model(a, info, file_flag, hf_flag)` adds a
    model file; `draft_extras(a)` the draft model's placement and cache flags."""
    if not plan.speculative:
        return
    names = FLAGS[dialect]
    if dialect != SPEC_TYPE_DIALECT:  # before --spec-type: -md turns drafting on
        if plan.method == "draft" and plan.draft is not None:
            _draft_model(a, plan, opts, names, model, draft_extras, plan.draft)
        return
    steps = [(plan.method, plan.k), *((s.method, s.k) for s in plan.chain)]
    a.add("--spec-type", ",".join(SPEC_TYPES[m] for m, _ in steps))
    for method, k in steps:
        if method in MODEL_TYPES:
            if method in FILE_TYPES and plan.draft is None:
                raise BackendError(f"'{method}' speculation needs a draft file (-md); name one "
                                   "in the profile (`specctl drafts MODEL`)")
            # mtp drafts with the target's own layers, or a sidecar file when the plan has one
            _draft_model(a, plan, opts, names, model, draft_extras, plan.draft, k)
        elif method in SIZE_TYPES:
            kind = SIZE_TYPES[method]
            a.add(f"--spec-ngram-{kind}-size-n", plan.ngram_max)
            a.add(f"--spec-ngram-{kind}-size-m", k)
            if opts.ngram_min_hits is not None:
                a.add(f"--spec-ngram-{kind}-min-hits", opts.ngram_min_hits)
        elif method == "ngram-mod":
            n_min, n_match = ngram_mod_knobs(k, opts)
            a.add("--spec-ngram-mod-n-max", k)
            a.add("--spec-ngram-mod-n-min", n_min)
            a.add("--spec-ngram-mod-n-match", n_match)


# Short drafts (k under the build's own n-max): the build's own default n-min (48) drafts only
# when 48 tokens are found; for the short outputs of a chat turn a few tokens are already worth
# verifying.
NGRAM_MOD_N_MIN = 4
# The build's lookup length (24) needs 24 tokens copied before it drafts again after each change:
# an edit of a short function changes a line every 20-40 tokens. Measured here on the edit suite
# (cpu-demo, 256 tokens, quiet machine): n-match 8 gave 1.52x the baseline, 24 gave 1.33x, 12
# gave 1.42x, 4 gave 1.20x (drafting on every short coincidence).
NGRAM_MOD_N_MATCH = 8
# Long drafts (k at the build's own n-max or more): the build's own `--spec-default` knobs
# (n-match 24, n-min 48, n-max 64), which copy whole files back: 2.20x end to end over no
# draft on whole-file edits (cpu-demo, 256 tokens, as issue 60 measured it), where k=16 with
# the short knobs drafts a line at a time.
NGRAM_MOD_LONG = 64
NGRAM_MOD_LONG_N_MIN = 48
NGRAM_MOD_LONG_N_MATCH = 24


def ngram_mod_knobs(k: int, opts: SpecKnobs) -> tuple[int, int]:
    """ngram-mod's (n-min, n-match) for a draft of up to k tokens: the profile's where it sets
    them, else the short or the long defaults above by k; n-min never above k."""
    long = k >= NGRAM_MOD_LONG
    n_min = opts.ngram_mod_n_min if opts.ngram_mod_n_min is not None else (
        NGRAM_MOD_LONG_N_MIN if long else NGRAM_MOD_N_MIN)
    n_match = opts.ngram_mod_n_match if opts.ngram_mod_n_match is not None else (
        NGRAM_MOD_LONG_N_MATCH if long else NGRAM_MOD_N_MATCH)
    return min(k, n_min), n_match


def _draft_model(a: Argv, plan: Plan, opts: SpecKnobs, names: dict[str, str], model: Any,
                 draft_extras: Any, draft: ModelInfo | None, k: int | None = None) -> None:
    if draft is not None:
        model(a, _sidecar_repo(draft), "-md", "-hfd")
    a.add(names["n_max"], plan.k if k is None else k)
    if opts.n_min is not None:
        a.add(names["n_min"], opts.n_min)
    if plan.p_min is not None:
        a.add(names["p_min"], plan.p_min)
    if draft is not None:
        draft_extras(a)


def _sidecar_repo(draft: ModelInfo) -> ModelInfo:
    """A sidecar on the Hub (`hf:org/repo:MTP`) is asked for by its repo alone: llama-server
    finds the sidecar of the requested --spec-type there itself."""
    if draft.path is None and draft.ref.startswith("hf:"):
        repo, _, tag = draft.ref.removeprefix("hf:").partition(":")
        if tag.upper() in SIDECAR_TAGS:
            return replace(draft, ref=f"hf:{repo}")
    return draft
