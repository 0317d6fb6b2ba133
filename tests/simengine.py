"""A simulated engine for the decision logic of `tune` and `bench`: a known speed law (Leviathan
et al.: E(k) = (1 - a^(k+1)) / (1 - a) tokens per step, a step of draft length k costing
k*c + v(k) target steps), a prefill law (each prompt's tokens at the target's prefill speed,
and a draft model's own prefill of them at `draft_prefill` of the target's cost per token: a
cost of a draft configuration, which n-gram has not), exact draft counters, and injected noise:
bursts of 0.5-3 s, each slowing whatever runs during it 2-5x, covering a set share of the time.
A simulated clock: no real sleeping, a tune takes milliseconds.

It speaks the `Lab` protocol (orchestrator/measure/lab/servers.py), which the real servers speak
too.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from specctl.orchestrator.contract.plan import NGRAMS, Plan
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.measure.lab.servers import Config, Timed
from specctl.orchestrator.measure.prompts.workload import Prompt, Timing, Workload, throughput_ratio
from specctl.orchestrator.planning import costmodel

CATEGORIES = ("code", "code", "chat", "chat", "summarize", "summarize")


class Bursts:
    """Noise on a timeline: bursts of 0.5-3 s slowing work 2-5x, `share` of the time; each
    burst is another process using one core."""

    def __init__(self, rng: random.Random, share: float) -> None:
        self.rng, self.share = rng, share
        self.spans: list[tuple[float, float, float]] = []  # start, end, slowdown
        self._until = 0.0

    def _grow(self, horizon: float) -> None:
        mean_gap = 1.75 * (1 - self.share) / self.share
        while self._until < horizon:
            start = self._until + self.rng.expovariate(1 / mean_gap)
            end = start + self.rng.uniform(0.5, 3.0)
            self.spans.append((start, end, self.rng.uniform(2.0, 5.0)))
            self._until = end

    def run(self, t: float, work: float) -> tuple[float, float]:
        """Run `work` quiet-seconds from time t: (elapsed, mean cores used by others)."""
        if self.share <= 0:
            return work, 0.0
        self._grow(t + work * 6 + 10)
        now, left, busy = t, work, 0.0
        for start, end, slow in self.spans:
            if end <= now:
                continue
            if start > now:  # quiet until the burst
                step = min(left, start - now)
                now, left = now + step, left - step
                if left <= 0:
                    break
            span = end - now  # inside the burst
            step = min(left, span / slow)
            now, left, busy = now + step * slow, left - step, busy + step * slow
            if left <= 0:
                break
        now += max(left, 0.0)
        return now - t, busy / (now - t) if now > t else 0.0


@dataclass
class Law:
    """The speed law: acceptance per prompt, c, v(k), the baseline's speed."""

    alphas: Sequence[float] = (0.85, 0.85, 0.7, 0.7, 0.8, 0.8)
    cost: float = 0.2
    verify: Callable[[float], float] = lambda k: 1 + 0.1 * k
    base_tps: float = 20.0
    ngram_gain: Sequence[float] = (1.0,) * 6  # n-gram's speedup per prompt
    ngram_drafts: bool = True  # False: n-gram finds nothing to draft (its speed is noise)
    # the other draftless methods' (ngram-mod, ...) speedup per prompt: by default they find
    # nothing these laws' replies copy (a step yields a token, as the baseline's)
    lookup_gain: Sequence[float] = (1.0,) * 6
    mix: dict[str, float] = field(default_factory=dict)
    # the length law (0: none): a reply of fewer tokens than `ramp` starts as replies do, the
    # draft guessing its opening well (its acceptance up to `opening` higher) and n-gram
    # copying nothing yet (its gain grows with the length to full at `ramp`), as cpu-demo's
    # 16-token requests measured (draft 1.52-1.68x for 1.18-1.30x at 96; n-gram 0.94x on a
    # summary it speeds 1.22x)
    ramp: int = 0
    opening: float = 0.0
    # the prefill law (no prompt tokens: none): each prompt's tokens, the target's prefill
    # tokens/s, a draft model's prefill cost per token relative to the target's, and where the
    # server counts the draft's prefill: in the time to the first token ("ttft") or in the
    # decode time after it ("decode")
    prompt_tokens: Sequence[int] = (0,) * 6
    prefill_tps: float = 100.0
    draft_prefill: float = 0.3
    draft_prefill_in: str = "ttft"
    replies: Sequence[int] = ()  # each prompt's reply length (none: max_tokens)
    categories: Sequence[str] = CATEGORIES  # each prompt's

    def ramped(self, tokens: int) -> float:
        """How far into its full behaviour a reply of `tokens` is (1: all the way)."""
        return min(1.0, tokens / self.ramp) if self.ramp else 1.0

    def gain(self, i: int, tokens: int) -> float:
        return 1 + (self.ngram_gain[i] - 1) * self.ramped(tokens)

    def alpha(self, i: int, tokens: int) -> float:
        return min(0.97, self.alphas[i] + self.opening * (1 - self.ramped(tokens)))

    def per_token(self, plan: Plan, i: int, draft_ref: str,
                  tokens: int = 64) -> tuple[float, float, float]:
        """Seconds per token, tokens per step, draft tokens per step (a reply of `tokens`)."""
        t0 = 1 / self.base_tps
        if not plan.speculative:
            return (t0 * self.cost if plan.target.ref == draft_ref else t0), 1.0, 0
        if plan.method == "ngram":
            return copying(t0, self.gain(i, tokens), plan.k)
        if plan.method in NGRAMS:  # drafts that cost nothing to make, as n-gram's
            return copying(t0, self.lookup_gain[i], plan.k)
        e = costmodel.tokens_per_step(self.alpha(i, tokens), plan.k)
        drafted = min(float(plan.k), e) if plan.p_min is not None else float(plan.k)
        return t0 * (drafted * self.cost + self.verify(drafted)) / e, e, drafted

    def workload(self) -> Workload:
        return Workload(tuple(Prompt(c, f"{c} prompt {n}", max_tokens=self.reply(n))
                              for n, c in enumerate(self.categories)), dict(self.mix))

    def reply(self, i: int) -> int | None:
        return self.replies[i] if self.replies else None

    def prefill(self, plan: Plan, i: int, draft_ref: str) -> tuple[float, float]:
        """Quiet seconds of prompt i's prefill: the target's, and the draft model's own (0
        without one)."""
        target = self.prompt_tokens[i] / self.prefill_tps
        drafts = plan.speculative and plan.method == "draft" and plan.target.ref != draft_ref
        return target, target * self.draft_prefill if drafts else 0.0

    def true_speedup(self, plan: Plan, draft_ref: str, tokens: int = 64) -> float:
        """The decode speedup the law gives (the step-time estimator's target)."""
        weights = self.workload().weights()
        base = [Timing(c, tokens, tokens / self.base_tps) for c in self.categories]
        mine = [Timing(c, tokens, tokens * self.per_token(plan, i, draft_ref, tokens)[0])
                for i, c in enumerate(self.categories)]
        return throughput_ratio(mine, base, weights)

    def true_latency(self, plan: Plan, draft_ref: str, tokens: int = 64,
                     only: str | None = None) -> float:
        """The end-to-end speedup the law gives: each prompt's prefill and decode, quiet (on
        the category `only`, where given)."""
        weights = {only: 1.0} if only is not None else self.workload().weights()
        base_plan = plan.baseline()
        base: list[Timing] = []
        mine: list[Timing] = []
        for i, c in enumerate(self.categories):
            n = self.reply(i) or tokens
            if only is not None and c != only:
                continue
            for side, out in ((base_plan, base), (plan, mine)):
                pre, draft = self.prefill(side, i, draft_ref)
                out.append(Timing(c, 1, pre + draft
                                   + n * self.per_token(side, i, draft_ref, n)[0]))
        return throughput_ratio(mine, base, weights)

    def best(self, plan: Plan, max_k: int = 8) -> tuple[int, float]:
        """The law's best plain draft length and its speedup."""
        draft_ref = plan.draft.ref if plan.draft else ""
        scores = {k: self.true_speedup(plan.but(k=k, p_min=None, method="draft"), draft_ref)
                  for k in range(1, max_k + 1)}
        k = max(scores, key=lambda x: scores[x])
        return k, scores[k]


def copying(t0: float, gain: float, k: int) -> tuple[float, float, float]:
    """A drafter that copies from the prompt (n-gram): its drafts cost nothing, it finds some
    where the reply repeats the prompt and few elsewhere (drafts per step follow the text, as
    real n-gram's do), and its steps yield `gain` tokens where that is a speedup."""
    e = max(gain, 1.0)
    return t0 / gain, e, min(float(k), (e - 1) * 3 + 0.05)


class SimLab:
    """The simulated engine as a Lab: servers that start in `start_s`, requests that take the
    law's time stretched by the bursts running while they do."""

    def __init__(self, law: Law, plan: Plan, seed: int = 0, noise: float = 0.3,
                 start_s: float = 3.0, fits: bool = True, server_timed: bool = False,
                 slow: Mapping[str, float] | None = None) -> None:
        """`server_timed`: replies timed as llama-server times them (its predicted_ms): the
        first token comes from the prompt's pass, outside the decode time and every step.
        `slow`: a server's own pace by label (1.15: each of its requests takes 15% longer than
        the law says: a server placed worse than its twin of the same argv)."""
        self.law, self.rng = law, random.Random(seed)
        self.server_timed = server_timed
        self.bursts = Bursts(self.rng, noise)
        self.draft_ref = plan.draft.ref if plan.draft else ""
        self.start_s, self.memory_fits = start_s, fits
        self.now = 0.0
        self.up: dict[str, Plan] = {}
        self.starts = 0
        self.restarts = 0  # its drafters forget between requests
        self.lines: list[str] = []
        self.aimed: dict[str, float] = {}
        self.most_up = 0
        self.workload = law.workload()
        self.asked: list[tuple[float, str, int]] = []  # (when, label, prompt) of each request
        self.slow = dict(slow or {})

    def say(self, line: str) -> None:
        self.lines.append(line)

    def keep(self, configs: Sequence[Config]) -> None:
        wanted = dict(configs)
        for label in [lbl for lbl in self.up if lbl not in wanted]:
            del self.up[label]
        for label, plan in configs:
            if label not in self.up:
                self.up[label] = plan
                self.starts += 1
                self.now += self.start_s
        self.most_up = max(self.most_up, len(self.up))

    def fits(self, plans: Sequence[Plan]) -> bool:
        return self.memory_fits or len(plans) < 2

    def ask(self, label: str, prompt: int, max_tokens: int) -> Timed:
        self.asked.append((self.now, label, prompt))
        plan = self.up[label]
        max_tokens = self.law.reply(prompt) or max_tokens  # the prompt's own length wins
        per_token, e, drafts = self.law.per_token(plan, prompt, self.draft_ref, max_tokens)
        k = plan.k if plan.speculative else 0
        # each step: one token plus those accepted (at most k); as llama-server times them,
        # the first token is the prompt's pass's, in no step
        made = max_tokens - 1 if self.server_timed else max_tokens
        accepted = min(round(made * (e - 1) / e), made * k // (k + 1))
        steps = made - accepted
        jitter = self.rng.uniform(1.0, 1.03)  # a quiet machine's own spread
        pre, draft_pre = self.law.prefill(plan, prompt, self.draft_ref)
        in_ttft = draft_pre if self.law.draft_prefill_in == "ttft" else 0.0
        first, first_busy = (self.bursts.run(self.now, (pre + in_ttft) * jitter)
                             if pre + in_ttft > 0 else (0.0, 0.0))
        elapsed, busy = self.bursts.run(self.now + first, (steps * per_token * e
                                                           + draft_pre - in_ttft) * jitter)
        if label in self.aimed and max_tokens > 16:  # a full-length request
            slow = self.aimed.pop(label)
            elapsed, first = elapsed * slow, first * slow
        elapsed *= self.slow.get(label, 1.0)
        first *= self.slow.get(label, 1.0)
        wall = first + elapsed + 0.02  # and the request's own overhead
        self.now += wall
        busy = (busy * elapsed + first_busy * first) / (elapsed + first) if elapsed + first \
            else 0.0
        spec = SpecStats()
        if plan.speculative and plan.method == "draft":
            a = self.law.alpha(prompt, max_tokens)
            per_pos = tuple(round(steps * a ** (j + 1)) for j in range(k))
            spec = SpecStats(max(accepted, round(steps * drafts)), accepted, steps, per_pos)
        elif plan.speculative and self.law.ngram_drafts:
            spec = SpecStats(round(steps * drafts), accepted, steps)
        elif plan.speculative:
            steps, accepted = made, 0
        return Timed(label, prompt, max_tokens, elapsed, spec, f"reply {prompt}", busy,
                     timed_by="server" if self.server_timed else "", wall_s=wall,
                     ttft_s=first, prompt_tokens=self.law.prompt_tokens[prompt])

    def hit(self, factor: float, label: str = "baseline") -> None:
        """The next request to `label` is slowed `factor` times (a burst aimed at it)."""
        self.aimed[label] = factor

    def clock(self) -> float:
        return self.now

    def close(self) -> None:
        self.up.clear()


def laws(n: int, plan: Plan, seed: int = 1) -> list[Law]:
    """`n` different laws whose best draft pays at least 1.2x."""
    rng = random.Random(seed)
    out: list[Law] = []
    while len(out) < n:
        base = rng.uniform(0.55, 0.92)
        alphas = tuple(min(0.97, max(0.3, base + d + rng.uniform(-0.04, 0.04)))
                       for d in (0.05, 0.05, -0.1, -0.1, 0.0, 0.0))
        slope = rng.uniform(0.02, 0.25)
        law = Law(alphas=alphas, cost=rng.uniform(0.08, 0.3), verify=_linear(slope))
        if law.best(plan)[1] >= 1.2:
            out.append(law)
    return out


def _linear(slope: float) -> Callable[[float], float]:
    return lambda k: 1 + slope * k
