"""The draft search, on the sources a command gathered (folders, the resolver, the Hub): every
candidate for a target on a backend, judged and ranked by planning/drafts.py; and what
draft = "auto" picks from them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.contract.plan import Method
from specctl.orchestrator.errors import ModelError, SpecctlError
from specctl.orchestrator.models import compat
from specctl.orchestrator.models.hub import Hub
from specctl.orchestrator.models.info import parse_ref
from specctl.orchestrator.models.resolve import Resolver
from specctl.orchestrator.planning import drafts
from specctl.orchestrator.planning.drafts import Candidate, Found


@dataclass(frozen=True)
class Sources:
    """Where candidates are looked for, as the command gathered them: folders of models (each
    with the name of where it is), the resolver (the Hugging Face cache, other tools' stores,
    a reference's metadata) and the Hub."""

    folders: tuple[tuple[Path, str], ...]
    resolver: Resolver
    hub: Hub


@dataclass(frozen=True)
class Search:
    """A search for drafts: for `target` on `backend`, its draftless `methods` too (none: draft
    models and, on a Hugging Face backend, EAGLE-3 heads), each within `room` bytes (None: any
    size)."""

    target: ModelInfo
    backend: Adapter
    methods: frozenset[str] = frozenset()
    room: int | None = None


def _found(search: Search, sources: Sources) -> tuple[list[Found], Candidate | None]:
    """Every candidate's reference: on the Hub, on disk, in the catalog; and a row that says
    the Hub was not searched, and why, when it could not be."""
    target, hub, methods = search.target, sources.hub, search.methods
    gguf = "gguf" in search.backend.formats
    try:
        on_hub = drafts.hub_entries(target, hub, gguf, search.room)
        on_hub += drafts.hub_heads(target, hub, methods, gguf)
        if gguf:
            on_hub += drafts.sidecars(target, hub, methods)
        note = None
    except SpecctlError as exc:
        on_hub, note = [], Candidate("hub", "(Hub search)", None, "hub", False,
                                     f"not searched: {exc}", 0.0)
    resolver = sources.resolver
    local = drafts.scan_local(list(sources.folders), resolver.hf_hub, resolver.stores.values())
    return [*local, *on_hub, *drafts.catalog_entries(target, search.backend.formats)], note


def candidates(search: Search, sources: Sources) -> list[Candidate]:
    """Every draft candidate for the search's target on its backend (on disk, on the Hub, in the
    catalog, and the draftless methods), judged by the backend's rule and ranked."""
    target, backend, room = search.target, search.backend, search.room
    found, note = _found(search, sources)
    opts = backend.options()

    def rule(t: ModelInfo, d: ModelInfo) -> str | None:
        return backend.draft_problem(opts, t, d, compat.vocab)

    def describe(ref: str) -> ModelInfo:
        return sources.resolver.resolve(ref, backend.default_quant)

    heads = search.methods if search.methods else "hf" in backend.formats
    ranked = drafts.rank(target, found, rule, heads, backend.default_quant, describe, room,
                         backend.formats, sources.resolver.headers)
    extra_rows = [*drafts.draftless(target, search.methods), *([note] if note else [])]
    ranked = sorted([*ranked, *extra_rows], key=lambda c: (c.compatible, c.score),
                    reverse=True)

    def requant(ref: str) -> str | None:  # the repo's best quantisation, as Hub search
        parsed = parse_ref(ref)
        if parsed.scheme != "hf" or "gguf" not in backend.formats:
            return None
        params = drafts.size_label(parsed.name.split("/")[1]) or 1.0
        quant = drafts.draft_quant(sources.hub, parsed.name, params, room)
        return None if quant in (None, parsed.quant) else f"hf:{parsed.name}:{quant}"

    return drafts.confirm(target, ranked, describe, rule, heads, room, requant)


@dataclass(frozen=True)
class Pick:
    """What draft = "auto" chose: a draft model (its reference), or a draftless method."""

    ref: str | None
    method: Method
    why: str


def pick(target: ModelInfo, backend: str, ranked: list[Candidate]) -> Pick:
    """draft = "auto": the best compatible candidate; one on disk unless another is clearly
    better; one to download is fetched by `up` (or `specctl models pull`)."""
    found = drafts.best(ranked)
    if found is None:
        raise ModelError(f"no compatible draft for {target.name} on {backend}; name one "
                         "in the profile (`specctl drafts MODEL` lists candidates and "
                         "why each was rejected)")
    rejected = sum(1 for c in ranked if not c.compatible)
    unread = [c for c in ranked if c.reason.startswith(drafts.UNREAD)]
    passed = "".join(f"; passed over {c.model}: {c.reason.removeprefix(drafts.UNREAD)}"
                     for c in unread)
    seen = f"{len(ranked)} candidates, {rejected} rejected{passed}"
    if found.source in ("target", "built-in"):  # draftless: the target's heads, n-gram
        return Pick(None, found.method, f"Draft \"auto\": {found.name}: {found.reason} ({seen}).")
    where = str(found.path) if found.path else f"{found.model}, {found.source}, to download"
    return Pick(found.model, found.method, f"Draft \"auto\": {found.name} ({where}) is the best "
                f"compatible draft: {found.reason} ({seen}).")
