"""Is speculation lossless here? `bench --quality` (and tune's shorter gate before it saves).

Sampling: the baseline server (the target alone) and the candidate server (speculative) are
sampled at the profile's temperature and top-p on the same prompts, many short completions each
(`n` choices per request, distinct seed streams per side so the two sides are independent draws),
and measure/lossless/twosample.py tests whether the two distributions differ, per category.

`against` puts something else on the candidate side, to check the check: "baseline" (a second
target-alone server: must pass) or "draft" (the draft model served alone: a really different
distribution, must fail).

The greedy numerics floor (bench): the backend's `rejecting` plan drafts and verifies in batches
but keeps only the target's tokens; its greedy outputs against the baseline's are the identity
that numerics alone allow (batched verification sums in another order than one-token decoding,
so near-ties can flip).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.launch import Installed
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.errors import ProfileError, SpecctlError
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.measure.lab import engine
from specctl.orchestrator.measure.lossless import numerics
from specctl.orchestrator.measure.lossless import twosample as quality
from specctl.orchestrator.runtime import client

AGAINST = ("speculative", "baseline", "draft")
GREEDY_TOKENS = 32  # tune's gate: greedy reply length compared per prompt


@dataclass(frozen=True)
class Sampling:
    temperature: float
    top_p: float
    samples: int = 32  # completions per prompt and side
    tokens: int = 12  # tokens per completion: the positions tested
    batch: int = 8  # completions per request (server slots)
    alpha: float = 0.05


def candidate(plan: Plan, against: str) -> Plan:
    """What stands on the candidate side."""
    if against == "speculative":
        if not plan.speculative:
            raise ProfileError(f"{plan.profile} does not speculate: nothing to check")
        return plan
    if against == "baseline":
        return plan.baseline()
    if against == "draft":
        if plan.draft is None:
            raise ProfileError(f"{plan.profile} has no draft model to serve alone")
        return plan.baseline().but(target=plan.draft)
    raise ProfileError(f"--quality-against takes {', '.join(AGAINST)}, not {against!r}")


def draw(served: engine.Served, prompt: str | Sequence[client.Message], how: Sampling, seed: int,
         extra: Mapping[str, Any] | None = None) -> list[list[client.Token]]:
    """`how.samples` completions, `how.batch` per request. A server gives choice i of a request
    seed + i (llama-server does), so requests step their seed by the batch: no two choices
    share a seed, which would make them the same sample twice (not independent draws).
    `extra`: more fields of each request (a structured prompt's `response_format`)."""
    out: list[list[client.Token]] = []
    while len(out) < how.samples:
        n = min(how.batch, how.samples - len(out))
        out += client.sample(served.endpoint, prompt, how.tokens, how.temperature, how.top_p,
                             seed + len(out), n, served.model, extra=extra)
    return out[:how.samples]


def compare(base: engine.Served, other: engine.Served, prompts: Mapping[str, list[str]],
            how: Sampling, say: Say) -> dict[str, quality.QualityResult]:
    """Sample both servers on every prompt (sides interleaved) and test each category."""
    results: dict[str, quality.QualityResult] = {}
    for cat, texts in prompts.items():
        samples = []
        for j, prompt in enumerate(texts):
            say(f"quality: {cat} #{j}: {how.samples} samples a side")
            seed = 7919 * (j + 1) + 104729 * len(results)
            a = draw(base, prompt, how, seed)
            b = draw(other, prompt, how, seed + 1_000_003)  # another seed stream: independent
            samples.append(quality.PromptSamples(a, b, label=f"{cat}#{j}"))
        results[cat] = quality.compare(samples, alpha=how.alpha, positions=how.tokens,
                                       category=cat)
    return results


def floor_verdict(identical: float | None, floor: float | None, n: int) -> str:
    """Greedy identity read against its numerics floor, in words."""
    if identical is None:
        return "-"
    if floor is None:
        return f"{identical:.0%} identical (floor not measured)"
    slack = max(0.1, 2 * (floor * (1 - floor) / max(n, 1)) ** 0.5)
    words = "numerics" if identical >= floor - slack else "below the floor: investigate"
    return f"{identical:.0%} identical; the floor here is {floor:.0%}: {words}"


def short(temperature: float, top_p: float) -> Sampling:
    """tune's budget: 16 completions of 8 tokens per prompt and side, and a false-alarm rate of
    0.2% per category (0.6% over three: a correct setting is almost never refused; 0.002 is the
    smallest level two families of 1999 permutations can reach)."""
    return Sampling(temperature, top_p, samples=16, tokens=8, alpha=0.002)


def gate(plan: Plan, backend: Adapter, installed: Installed, prompts: Mapping[str, list[str]],
         how: Sampling, logs: Path, say: Say, against: str = "speculative",
         replies: Sequence[tuple[str, str, int]] = ()) -> str:
    """tune's short check before it saves: the chosen setting sampled against the baseline on
    one prompt per category, greedy replies of both compared (measure/lossless/numerics.py), and the
    candidate's draft counters read. `replies`: the greedy pairs (reply, baseline reply,
    baseline tokens) tune's race already has for the setting, full length on every prompt it
    asked, where it drafted (the draft counters' check is then the race's); without them those
    prompts are answered greedily by both here (GREEDY_TOKENS: on a 4.5 tok/s CPU that was 30
    of the check's 85 s). Raises (one line) when a category's
    sampled output differs, the greedy replies diverge more or earlier than numerics explain,
    or a speculative engine that counts drafts drafted nothing; else a line that says what was
    checked. Short, so it catches gross breakage (a leaking draft, the draft served alone), not
    subtle shifts: `bench --quality` is the full check. `against` as in run (to check the gate
    itself)."""
    few = {cat: texts[:1] for cat, texts in prompts.items() if texts}
    other = candidate(plan, against)
    with ExitStack() as stack:
        say("quality: starting the baseline and candidate servers")
        a = stack.enter_context(engine.serve(plan.baseline().but(
            parallel=max(plan.parallel, how.batch)), backend, installed, logs, "quality-baseline"))
        b = stack.enter_context(engine.serve(other.but(parallel=max(other.parallel, how.batch)),
                                             backend, installed, logs, f"quality-{against}"))
        found = compare(a, b, few, how, say)
        greedy = list(replies) or [(b.ask(p, GREEDY_TOKENS).reply.text, *_text_and_tokens(
            a.ask(p, GREEDY_TOKENS))) for texts in few.values() for p in texts]
        drafted = b.counters().drafted
    checked = numerics.greedy(greedy)
    bad = [f"{cat} ({r.message()})" for cat, r in found.items() if r.differs]
    if not checked.explained:
        bad.append(f"greedy replies: {checked.message()}")
    if other.speculative and backend.draft_counters and drafted == 0 and not replies:
        # with the race's replies the setting drafted there (tune saves none that drafted
        # nothing); 8-token samples alone leave n-gram methods nothing to copy yet
        bad.append("the engine did not draft: it reported no drafted tokens")
    if bad:
        raise SpecctlError(f"{plan.describe_spec()} fails the check against the target "
                           f"alone: {'; '.join(bad)}; not saved. Check the engine build "
                           f"(`specctl bench -p {plan.profile} --quality` for the full check), "
                           "or tune with --no-quality to save it anyway")
    tested = ", ".join(f"{cat} p={r.p_value:.2g}" for cat, r in found.items())
    return (f"sampling at temperature {how.temperature:g}, top-p {how.top_p:g}: no difference "
            f"detected ({how.samples} samples x 1 prompt per category: {tested}; a short "
            f"check, `bench --quality` is the full one); greedy: {checked.message()}")


def _text_and_tokens(got: engine.Asked) -> tuple[str, int]:
    return got.reply.text, got.reply.tokens
