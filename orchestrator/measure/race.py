"""Paired trials for `specctl tune`: candidates against the baseline on the same prompts, in
blocks (paired: every server up, each prompt asked of each in turn; sequential: one server at a
time, A B B A ...), until the leader's interval is as narrow as asked or the time is spent.

Decisions rest on intervals (95%, measure/intervals.py), never on one sample:
- a challenger is compared with the leader directly: its speedup over the leader's on the
  same prompts and blocks (intervals.relative), where the baseline's noise cancels;
- it is dropped once that interval's top cannot beat the leader by the margin (from its
  first block on: a block is every prompt of the workload);
- it takes the lead only when that interval's point beats the leader by the margin and its
  bottom is above 1 (surely faster), or the leader cannot pay (its top is under the margin);
  so near-ties stay with the leader, the cost model's pick, and a tune repeats;
- "off" is decided only when no measured configuration's top reaches the margin;
- a configuration that drafted nothing is the baseline plus noise: it cannot lead;
- a pair above the physical bound is discarded as noise (and counted).
A challenger's first block is run only when it fits in what is left of the budget (by the
expected time of a request, `expect`): on a busy machine the fixed work (acceptance, costs)
can use most of it, and a block of every candidate would then overrun it several times; what
does not fit is reported as not measured, never as lost.
The leader is measured at least MIN_BLOCKS blocks before anything is settled; every decision
rests on a 95% interval over all the requests so far (a block is one request per prompt of the
workload on each side), never on one request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specctl.orchestrator.measure import intervals
from specctl.orchestrator.measure.intervals import Interval
from specctl.orchestrator.measure.lab import Config, Lab, Timed, rounds

MIN_BLOCKS = 1  # a block: one request per prompt of the workload, both sides


@dataclass
class Entry:
    label: str
    config: Config
    bound: float  # the physical bound for this configuration
    interval: Interval | None = None
    blocks: int = 0
    discarded: int = 0  # pairs above the bound
    dropped: str = ""  # why it stopped being measured
    drafted: int = 0

    @property
    def method(self) -> str:
        return self.config[1].method

    @property
    def poolable(self) -> bool:
        return intervals.poolable(self.config[1])


@dataclass
class Race:
    lab: Lab
    baseline: Config
    max_tokens: int
    sequential: bool
    margin: float
    precision: float
    deadline: float  # on the lab's clock
    samples: list[Timed] = field(default_factory=list)
    block: int = 0
    stopped: str = ""  # "precision", "decided" or "budget"
    expect: dict[str, float] = field(default_factory=dict)  # seconds a request, by label

    @property
    def cats(self) -> dict[int, str]:
        return {i: p.category for i, p in enumerate(self.lab.workload.prompts)}

    @property
    def weights(self) -> Mapping[str, float]:
        return self.lab.workload.weights()

    def measure(self, active: Sequence[Entry]) -> None:
        """One block of every active entry and the baseline."""
        configs = [self.baseline, *(e.config for e in active)]
        prompts = range(len(self.lab.workload.prompts))
        if not self.sequential and not self.lab.fits([p for _, p in configs]):
            self.sequential = True
            self.lab.say(f"{len(configs)} servers do not fit in memory together: one at a time")
        self.samples += rounds(self.lab, configs, prompts, self.max_tokens, self.block,
                               self.sequential)
        self.block += 1
        for e in active:
            e.blocks += 1
            self.judge(e)

    def pairs(self, e: Entry) -> intervals.Pairs:
        kept, e.discarded = intervals.plausible(
            intervals.pair(self.samples, e.label, self.baseline[0]), e.bound)
        return kept

    def judge(self, e: Entry) -> None:
        pairs = self.pairs(e)
        e.interval = intervals.speedup(pairs, self.cats, self.weights, poolable=e.poolable)
        e.drafted = sum(s.spec.drafted for ps in pairs.values() for s, _ in ps)

    def categories(self, e: Entry) -> dict[str, Interval]:
        pairs = self.pairs(e)
        out = {}
        for cat in self.lab.workload.categories:
            if self.weights.get(cat, 0.0) <= 0:
                continue  # not in the traffic tuned for
            got = intervals.speedup(pairs, self.cats, self.weights, only=cat,
                                    poolable=e.poolable)
            if got is not None:
                out[cat] = got
        return out

    def run(self, entries: list[Entry], leader: Entry | None = None) -> Entry:
        """Measure until settled; returns the leader (the first entry unless beaten)."""
        lead = leader or entries[0]
        active = [e for e in entries if not e.dropped]
        while active:
            active = self.admit(active, lead)
            self.measure(active)
            lead = self.leader([lead, *entries])
            for e in active:
                if e is not lead and self.hopeless(e, lead):
                    e.dropped = (f"cannot win: its {intervals.CONFIDENCE:.0%} interval reaches "
                                 f"{_top(e):.2f}x, it needs over "
                                 f"{_point(lead) * (1 + self.margin):.2f}x")
                    self.lab.say(f"{e.label}: {e.dropped}")
            active = [e for e in active if not e.dropped]
            if min([lead.blocks, *(e.blocks for e in active if e.blocks)]) < MIN_BLOCKS:
                active = [lead, *(e for e in active if e is not lead)]
                continue  # the budget too is looked at only from MIN_BLOCKS on
            if all(_top(e) < 1 + self.margin for e in [lead, *active]):
                self.stopped = "decided"  # no top reaches the baseline plus the margin
                break
            rivals = [e for e in active if e is not lead]
            if not rivals and lead.interval is not None \
                    and lead.interval.half_width <= self.precision:
                self.stopped = "precision"
                break
            if self.lab.clock() >= self.deadline:
                self.stopped = "budget"
                break
            active = [lead, *rivals] if lead not in active else active
        return lead

    def admit(self, active: list[Entry], lead: Entry) -> list[Entry]:
        """The active entries whose next block fits in the budget left: the leader always;
        a challenger not yet measured only while the block's expected time fits (in order).
        Without expectations every one is admitted."""
        if not self.expect:
            return active
        n = len(self.lab.workload.prompts)
        left = self.deadline - self.lab.clock()
        out = [e for e in active if e is lead or e.blocks]
        need = n * sum(self._expected(label) for label in [self.baseline[0],
                                                             *(e.label for e in out)])
        for e in [e for e in active if e not in out]:
            more = n * self._expected(e.label)
            if need + more <= left:
                need += more
                out.append(e)
                continue
            e.dropped = (f"not measured: {max(left, 0.0):.0f} s of the budget were left and a "
                         f"block with it takes about {need + more:.0f} s; a longer --budget "
                         "measures it")
            self.lab.say(f"{e.label}: {e.dropped}")
        return out

    def _expected(self, label: str) -> float:
        return self.expect.get(label, self.expect.get(self.baseline[0], 0.0))

    def versus(self, e: Entry, lead: Entry) -> Interval | None:
        """e's speedup over the leader's on the prompts and blocks both measured."""
        return intervals.relative(self.pairs(e), self.pairs(lead), self.cats, self.weights,
                                  poolable=(e.poolable, lead.poolable))

    def hopeless(self, e: Entry, lead: Entry) -> bool:
        if e.interval is None:
            return True
        rel = self.versus(e, lead)
        return e.interval.high <= _point(lead) * (1 + self.margin) or (
            rel is not None and rel.high <= 1 + self.margin) or (
            e.blocks >= MIN_BLOCKS and e.drafted == 0)

    def leader(self, entries: Sequence[Entry]) -> Entry:
        lead = entries[0]
        for e in entries[1:]:
            if e is lead or e.interval is None or e.drafted == 0 or e.blocks < MIN_BLOCKS \
                    or e.interval.point > e.bound:  # above the physical bound: noise
                continue
            # beats it by the margin, surely (measured against it directly; without common
            # prompts, its bottom above the lead's point), or the lead cannot pay at all
            # (its top under the baseline plus the margin)
            rel = self.versus(e, lead)
            ahead = rel.point > 1 + self.margin and rel.low > 1 if rel is not None else (
                e.interval.point > _point(lead) * (1 + self.margin)
                and e.interval.low > _point(lead))
            if ahead or (_top(lead) < 1 + self.margin
                         and e.interval.point > _point(lead) * (1 + self.margin)):
                lead = e
        return lead

    def drift(self) -> float:
        return intervals.drift(self.samples, self.baseline[0])


def _point(e: Entry) -> float:
    return e.interval.point if e.interval else 0.0


def _top(e: Entry) -> float:
    return e.interval.high if e.interval else 0.0
