"""The step costs of a speculative configuration from short requests: many of them, interleaved
across the configurations (or in alternating blocks, one server at a time), each cost a low
quantile of its timings (outside load only lengthens a request), each configuration's requests
as long in time as the baseline's (StepCosts.lengths). c is the draft's step over the
target's; v(k) a verification step of k drafts, in target steps."""

from __future__ import annotations

from collections.abc import Sequence

from specctl.orchestrator.measure.estimates.intervals import LOW_Q, quantile
from specctl.orchestrator.measure.lab.servers import Config, Lab, Timed, rounds
from specctl.orchestrator.measure.prompts.workload import Prompt, Workload

SHORT_TOKENS = 16  # the short requests that time the costs (the baseline's length)
LONGEST = 8 * SHORT_TOKENS  # a faster configuration's, to last as long as the baseline's
COST_BLOCKS = 2  # short requests per prompt and configuration...
MIN_SAMPLES = 8  # ...and at least this many per configuration (few prompts: more rounds)


def shortest(work: Workload) -> list[int]:
    """The prompts that time the costs: the shortest of each category of the workload's mix.
    c is a decode cost; a long prompt's prefill only makes a short request long (bench spent
    859 s of a run timing c on every prompt of five suites, documents of 1-2k tokens among them;
    tune 39 s of its 240 s budget on documents of 600-800 tokens). One of each category still:
    tune's race expects its first block's time from these (their prefill beside decoding)."""
    weights = work.weights()
    best: dict[str, int] = {}
    for i, p in enumerate(work.prompts):
        if weights.get(p.category, 0.0) <= 0:
            continue
        if p.category not in best or _size(p) < _size(work.prompts[best[p.category]]):
            best[p.category] = i
    return list(best.values())


def _size(p: Prompt) -> int:
    return sum(len(t) for t in p.turns) + len(p.system or "")


class StepCosts:
    """The short timings and what they give: each configuration's time per token (c is the
    draft alone's over the baseline's; tune takes v(k) from its race)."""

    def __init__(self, lab: Lab, baseline: Config, sequential: bool) -> None:
        self.lab, self.baseline, self.sequential = lab, baseline, sequential
        self.samples: list[Timed] = []

    def time(self, configs: Sequence[Config], prompts: Sequence[int] | None = None,
             least: int = MIN_SAMPLES, until: float | None = None,
             per_prompt: int = COST_BLOCKS) -> None:
        """Short requests, COST_BLOCKS per prompt and configuration and at least `least`
        (and the baseline's, the first time): interleaved with every server up, else all of
        one server's in one block (a server starts once). `prompts`: these only (default all).
        `until` (on the lab's clock): no more requests once it has passed, one of each
        configuration taken (on a busy machine short requests too can take minutes).
        `per_prompt`: short requests per prompt and configuration at least (COST_BLOCKS)."""
        prompts = list(range(len(self.lab.workload.prompts)) if prompts is None else prompts)
        n = len(prompts)
        blocks = max(per_prompt, -(-least // n))
        timed = any(t.label == self.baseline[0] for t in self.samples)
        everyone = [*configs] if timed else [self.baseline, *configs]  # its time is known
        seq = self.sequential or not self.lab.fits([p for _, p in everyone])
        for cfgs, block, i in ([([c], 0, i) for c in everyone for i in prompts * blocks] if seq
                               else [(everyone, b, i) for b in range(blocks) for i in prompts]):
            if until is not None and self.lab.clock() >= until and all(
                    any(t.label == c[0] for t in self.samples) for c in cfgs):
                continue
            self.samples += rounds(self.lab, cfgs, [i], SHORT_TOKENS, block, seq,
                                   None if seq else self.lengths())

    def lengths(self) -> dict[str, int]:
        """Each configuration's request length so that it lasts as long as the baseline's (by
        the median time per token so far): outside load comes in bursts, and a short request
        slips between them more often than a long one. Timed at unlike lengths, the faster side
        would be seen clean and the slower one not, and c would come out too low."""
        base = [t.per_token for t in self.samples if t.label == self.baseline[0]]
        if not base:
            return {}
        mid = quantile(base, 0.5)
        out = {}
        for label in {t.label for t in self.samples} - {self.baseline[0]}:
            mine = quantile([t.per_token for t in self.samples if t.label == label], 0.5)
            if mine > 0:
                out[label] = max(SHORT_TOKENS, min(LONGEST, round(SHORT_TOKENS * mid / mine)))
        return out

    def per_token(self, label: str) -> float:
        return quantile([t.per_token for t in self.samples if t.label == label], LOW_Q)
