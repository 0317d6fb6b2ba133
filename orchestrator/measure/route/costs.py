"""What a served setting costs a request, fitted from tune's own samples and saved with the
tuned result (tuned.Timing, tuned.Shape); what the route reads of it (`RequestCosts`).

A request of P prompt tokens answered in N tokens takes about

    T_s = P * f_s + N * d_s(kind)

on setting s (measure/route/choose.py sends it where T_s is least):

- f_s, prefill seconds per prompt token: a low quantile (LOW_Q) of the time to the first token
  over the prompt's tokens, over the one-turn requests of MIN_PROMPT tokens or more of every
  setting that prefills what s does (`prefills`: the target alone for no draft and the n-gram
  methods, the target and the draft model for a draft at any k: the same work, so one pool,
  and a setting measured on no long prompt has its class's f), each with the outside load it
  ran beside taken out (lab.Timed.first_token). Not a least-squares fit
  with an intercept: that needs short and long prompts of one setting (tune's short prompts
  are code's 30-40 tokens and conversations, whose later turns reuse their cache), and one
  request beside a burst pulls its slope, where outside load only raises a ratio and the low
  quantile takes a calm one. What the ratio leaves in, the request's own overhead and its first
  decode step (about 0.2 s on cpu-demo, against 3-10 s of prefill at 256 tokens and more), is
  paid by every setting alike: each f is a few percent high, and so each crossing as well.
  A draft model's prefill is in s's time to the first token where the engine does it first
  (llama.cpp), else in its decode time: either way in T_s.
- d_s(c), decode seconds per answer token on category c: a low quantile of the time after the
  first token over the tokens after it, over s's requests of c (a conversation: its turns
  summed).
- per category (the baseline's requests): the median answer (tokens a turn), whether half or
  more ran to the length asked (the median is then a floor), and the characters per prompt
  token (its one-turn prompts of MIN_PROMPT tokens or more: the chat template's few tokens are
  a small share there).

A kind's figures are the mean of its categories' (classify.SUITE_KINDS, or a category's
majority kind); a kind no category was tuned on takes the mean of all of them. A request's P is
its prompt's characters over its kind's characters per token; its N the kind's typical answer,
at most its max_tokens (where the kind's answers ran to tune's length, its typical is only a
floor: its max_tokens where given).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from specctl.orchestrator.contract.plan import NGRAMS, Plan
from specctl.orchestrator.measure.estimates.estimate import LOW_Q, quantile
from specctl.orchestrator.measure.lab.servers import Config, Timed
from specctl.orchestrator.measure.prompts.workload import Prompt, Workload
from specctl.orchestrator.measure.results.tuned import Result, Shape, Timing, chain_of
from specctl.orchestrator.measure.route import classify

MIN_PROMPT = 256  # prompt tokens from which a request's first token is mostly its prefill


def prefill(samples: Sequence[Timed]) -> float | None:
    """f: seconds a prompt token, from one-turn requests of MIN_PROMPT tokens or more."""
    per = [t.first_token / t.prompt_tokens for t in samples
           if t.turns == 1 and t.prompt_tokens >= MIN_PROMPT and t.ttft_s > 0]
    return quantile(per, LOW_Q) if per else None


def decode(samples: Sequence[Timed]) -> float | None:
    """d: seconds an answer token after the first (None: no request made two tokens)."""
    per = [(t.end_to_end - t.first_token) / (t.tokens - t.turns) for t in samples
           if t.tokens > t.turns and t.wall_s > 0 and t.end_to_end > t.first_token]
    return quantile(per, LOW_Q) if per else None


def prefills(plan: Plan) -> str:
    """What a setting prefills, which its f is of: the target alone (no draft, n-gram methods:
    they read the prompt, they compute nothing on it), the target and its draft model (a draft
    at any k, chained or not), or the target and a head of its own (per method)."""
    if plan.method == "none" or plan.method in NGRAMS:
        return "target"
    return f"draft {plan.draft.ref}" if plan.method == "draft" and plan.draft else plan.method


def timing(label: str, config: Config, samples: Sequence[Timed], cats: Mapping[int, str],
           f: float | None) -> Timing | None:
    """A configuration's Timing from its samples (None: it has none); `f`: its prefill's."""
    mine = [t for t in samples if t.label == label]
    if not mine:
        return None
    plan = config[1]
    by_cat: dict[str, list[Timed]] = {}
    for t in mine:
        by_cat.setdefault(cats[t.prompt], []).append(t)
    per = {c: decode(ts) for c, ts in by_cat.items()}
    return Timing(label=label, method=plan.method, k=plan.k, p_min=plan.p_min,
                  chain=chain_of(plan.chain), prefill=_four(f) if f else None,
                  decode={c: _four(d) for c, d in per.items() if d})


def _four(x: float) -> float:
    """Four significant figures (a GPU's prefill is a few microseconds a token)."""
    return float(f"{x:.4g}")


def shapes(baseline: Sequence[Timed], work: Workload, asked: int) -> dict[str, Shape]:
    """Each category's Shape from the baseline's samples (`asked`: the tokens a request
    asked for), and its kind (classify.kind_of)."""
    out = {}
    for cat in work.categories:
        mine = [t for t in baseline if work.prompts[t.prompt].category == cat and t.tokens]
        if not mine:
            continue
        turns = [t.tokens / t.turns for t in mine]
        long = [t for t in mine if t.turns == 1 and t.prompt_tokens >= MIN_PROMPT]
        chars = sum(_chars(work.prompts[t.prompt]) for t in long)
        tokens = sum(t.prompt_tokens for t in long)
        ran_out = [n >= (work.prompts[t.prompt].max_tokens or asked) - 1
                   for n, t in zip(turns, mine, strict=True)]
        out[cat] = Shape(kind=classify.kind_of(cat, [p.text for p in work.prompts
                                                     if p.category == cat]),
                         answer=max(1, round(statistics.median(turns))),
                         ran_out=2 * sum(ran_out) >= len(ran_out),
                         chars_per_token=min(64.0, max(0.5, round(chars / tokens, 3)))
                         if tokens else None)
    return out


def _chars(p: Prompt) -> int:
    """The characters a prompt's request carries (its system message and its turns)."""
    return len(p.system or "") + sum(len(t) for t in p.turns)


def fitted(samples: Sequence[Timed], configs: Sequence[Config], work: Workload,
           asked: int) -> dict[str, object]:
    """The tuned result's `timings` (the baseline first) and `shapes`, from the race."""
    cats = {i: p.category for i, p in enumerate(work.prompts)}
    does = {label: prefills(plan) for label, plan in configs}
    pooled: dict[str, list[Timed]] = {}
    for t in samples:
        if t.label in does:
            pooled.setdefault(does[t.label], []).append(t)
    f = {work_: prefill(ts) for work_, ts in pooled.items()}
    rows = [timing(label, cfg, samples, cats, f.get(does[label])) for label, cfg in
            dict((c[0], c) for c in configs).items()]
    base = [t for t in samples if t.label == configs[0][0]]
    return {"timings": [r for r in rows if r is not None],
            "shapes": shapes(base, work, asked)}


@dataclass(frozen=True)
class RequestCosts:
    """Per setting (as the route names them) its f and its d by kind; per kind its typical
    answer (tokens, and whether it is a floor) and its characters per prompt token."""

    prefill: Mapping[str, float]
    decode: Mapping[str, Mapping[str, float]]
    answer: Mapping[str, tuple[float, bool]]
    chars_per_token: Mapping[str, float]

    def tokens(self, facts: classify.Facts) -> tuple[float, float]:
        """The request's P and N."""
        cpt = self.chars_per_token.get(facts.kind) or _mean(self.chars_per_token.values())
        typical, floor = self.answer.get(facts.kind) or (
            _mean(a for a, _ in self.answer.values()), False)
        wanted = facts.max_tokens
        n = typical if wanted is None else wanted if floor else min(wanted, typical)
        return (facts.chars / cpt if cpt else 0.0), n

    def time(self, setting: str, facts: classify.Facts) -> float | None:
        """T of the request on `setting` (None: no figures for it)."""
        f, per = self.prefill.get(setting), self.decode.get(setting)
        if f is None or not per:
            return None
        d = per.get(facts.kind) or _mean(per.values())
        p, n = self.tokens(facts)
        return p * f + n * d


def _mean(values: Iterable[float]) -> float:
    got = list(values)
    return sum(got) / len(got) if got else 0.0


def costs_of(result: Result, setting: Callable[[Timing], str]) -> RequestCosts | None:
    """The RequestCosts of a saved result, its settings named by `setting`; None where it has no
    figures to route by (a result saved before them, or no prompt long enough for f)."""
    kinds = {c: s.kind or classify.SUITE_KINDS.get(c) for c, s in result.shapes.items()}
    rows = [t for t in result.timings if t.prefill is not None and t.decode]
    if not rows or not result.shapes:
        return None
    decode: dict[str, dict[str, float]] = {}
    for t in rows:
        by_kind: dict[str, list[float]] = {}
        for cat, d in t.decode.items():
            if kinds.get(cat):
                by_kind.setdefault(kinds[cat] or "", []).append(d)
        decode[setting(t)] = {k: sum(v) / len(v) for k, v in by_kind.items()}
    answer: dict[str, list[Shape]] = {}
    for cat, shape in result.shapes.items():
        if kinds[cat]:
            answer.setdefault(kinds[cat] or "", []).append(shape)
    return RequestCosts(prefill={setting(t): t.prefill or 0.0 for t in rows}, decode=decode,
                 answer={k: (_mean(s.answer for s in v), any(s.ran_out for s in v))
                         for k, v in answer.items()},
                 chars_per_token={k: _mean(cpt) for k, v in answer.items()
                                  if (cpt := [s.chars_per_token for s in v
                                              if s.chars_per_token])})
