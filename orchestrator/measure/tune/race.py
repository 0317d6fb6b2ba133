"""Paired trials for `specctl tune`: candidates against the baseline on the same prompts, in
blocks (paired: every server up, each prompt asked of each in turn; sequential: one server at a
time, A B B A ...), until the leader's interval is as narrow as asked or the time is spent.

Breadth first (`breadth`): before any other candidate, every kind (category) of the traffic is
measured with the baseline and the incumbent (the setting served now, or the cost model's
guess), one prompt of each. Two default tunes on a quiet machine had decided opposite things
from one request per candidate and kind: the first, its block cut by the budget after code,
saved draft k=4 at 1.18x with docqa and multiturn not measured; the second measured it 0.72x on
multi-turn and saved "off". A kind the budget had no room for even so is left unmeasured, and
said: no pick measured on another kind is its winner.

Decisions rest on intervals (95%, measure/estimates/intervals.py), never on one sample; an
interval needs MIN_REQUESTS paired requests of each kind (`judged`: from fewer, a bootstrap
draws one of a few values, and none is said or saved):
- a challenger is compared with the leader directly: its speedup over the leader's on the
  same prompts and blocks (intervals.relative), where the baseline's noise cancels;
- it is dropped once that interval's top cannot beat the leader by the margin (once it has
  MIN_SIFT requests of each category: dropping stops measuring it; the pick, its precision
  and "off" need MIN_REQUESTS);
- it takes the lead only when that interval's point beats the leader by the margin and its
  bottom is above 1 (surely faster), or the leader cannot pay (its top is under the margin);
  so near-ties stay with the leader, the cost model's pick, and a tune repeats;
- "off" is decided only when no measured configuration's top reaches the margin;
- a configuration that drafted nothing is the baseline plus noise: it cannot lead;
- a pair above the physical bound is discarded as noise (and counted);
- the pick never surely slows a category of the workload: a configuration whose interval on
  one lies wholly below 1.00x (`slows`, tuned.slowed: a tie within 2% and, on fewer requests
  than an interval needs, a point within the margin do not) gives way to the best of those
  that slow none and pay (`fair`), or to "off" where none does; so a draft that wins the
  weighted figure on code and loses end to end on questions over long documents is not
  picked for all traffic.
The budget holds: a block runs only as far as it fits in what is left (by the expected time of
each configuration's requests, from its own timings so far, else the baseline's). Every request
is full length (max_tokens): a reply's speedup depends on its length (on cpu-demo at 16 tokens
the draft measured 1.52-1.68x where it gives 1.18-1.30x at 96, and n-gram, which has copied
nothing yet, 0.94x on a summary it speeds 1.22x), so a screen of short requests drops the wrong
configurations. A block is cut in prompts instead: it asks as many as fit in SHARE of the time
left (one of each category at least, taken in turn; the next cut block goes on with the prompts
after them), so the first, with every candidate that fits in it, leaves time for the blocks
after it. A block takes the leader, then the challengers not measured yet, then the measured
ones (best first), each while one round of the categories fits with it; one left out waits for
the next block, and one the budget never had room for is reported as not measured, never as
lost. Where load makes a block longer than expected, the categories it has not reached are
asked only of the baseline and the configurations best so far (narrow): a configuration
measured without a category the leader has cannot lead or be picked.
Only a budget with no room for one full-length round of the first block asks shorter requests
(for the whole race, so that no decision mixes lengths), and says so.
Every decision rests on a 95% interval over all the requests so far, never on one request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from specctl.orchestrator.measure.estimates import intervals
from specctl.orchestrator.measure.estimates.estimate import MIN_REQUESTS
from specctl.orchestrator.measure.estimates.intervals import Interval
from specctl.orchestrator.measure.lab.servers import BUSY, Config, Lab, Timed, rounds
from specctl.orchestrator.measure.results import tuned

MIN_BLOCKS = 1  # a block: one request per prompt of the workload, both sides
MIN_SIFT = 2  # requests of each category before a challenger may be dropped (`sifted`): at
# MIN_REQUESTS, 20 simulated default tunes each ran out the budget on seven candidates and most
# saved a pick with no interval; the pick, its precision and "off" still need MIN_REQUESTS
SLACK = 1.05  # a block may run to this share of the time left (expectations are medians)
HEADROOM = 1.25  # a screen leaves the leader's confirmation this much more than expected (a
# block under bursts ran 1.7 times its expectation)
SHARE = 0.45  # of the time left: as many prompts as a block fits in it are asked
MIN_TOKENS = 16  # the shortest request, where a budget has no room for a full-length round
UNSEEN = 1.1  # a configuration not measured yet is expected this much slower than the baseline
# (most are faster; as fast kept too few seconds for a block cut short by bursts of load)


@dataclass
class Contender:
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
    def poolable(self) -> intervals.Pooling:
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
    turn: int = 0  # where in order() the next block cut in prompts starts
    tokens: int = 0  # the request length (max_tokens; shorter only where the budget has no
    # room for one full-length round of the first block)
    prior: list[Timed] = field(default_factory=list)  # timings from before (expectations only)
    start_s: float = 0.0  # expected seconds to start a server
    samples: list[Timed] = field(default_factory=list)
    block: int = 0
    stopped: str = ""  # "precision", "decided" or "budget"
    pace: float = 1.0  # a block's time over its expected time (restarts, starts, load): the
    # mean of the blocks' so far and the start's (`paced`)
    paces: list[float] = field(default_factory=list)
    broad: list[int] = field(default_factory=list)  # breadth's prompts, its block the first
    extend: bool = False  # the next block goes on with breadth's (`admit`)
    unseen: float = UNSEEN  # this block's: 1 where the first block's rival fits only so
    objective: intervals.Objective = "latency"  # what a configuration's speedup is of

    @property
    def cats(self) -> dict[int, str]:
        return {i: p.category for i, p in enumerate(self.lab.workload.prompts)}

    @property
    def weights(self) -> Mapping[str, float]:
        return self.lab.workload.weights()

    @property
    def kinds(self) -> int:
        """How many categories the traffic tuned for has (a round: one prompt of each)."""
        return len({self.cats[i] for i in self.order()})

    def fitting(self, entries: Sequence[Contender], room: float, least: int) -> int:
        """The most prompts (`least` at least, every prompt at most) whose block of `entries`
        fits in `room` seconds."""
        n = len(self.order())
        while n > least and self.cost(entries, n) > room:
            n -= 1
        return n

    def prompts(self, n: int) -> list[int]:
        """`n` prompts of order(), from where the last cut block stopped (all: in order)."""
        order = self.order()
        if n >= len(order):
            return order
        start = self.turn % len(order)
        self.turn = start + n
        return [order[(start + j) % len(order)] for j in range(n)]

    def order(self) -> list[int]:
        """The workload's prompts taken one of each category in turn (a block cut short stays
        balanced), categories outside the traffic tuned for left out."""
        by_cat: dict[str, list[int]] = {}
        for i, p in enumerate(self.lab.workload.prompts):
            if self.weights.get(p.category, 0.0) > 0:
                by_cat.setdefault(p.category, []).append(i)
        out: list[int] = []
        for n in range(max((len(v) for v in by_cat.values()), default=0)):
            out += [v[n] for v in by_cat.values() if n < len(v)]
        return out

    def measure(self, active: Sequence[Contender], prompts: Sequence[int] | None = None) -> None:
        """One block of every active entry and the baseline (on `prompts`: all by default)."""
        configs = [self.baseline, *(e.config for e in active)]
        if not self.sequential and not self.lab.fits([p for _, p in configs]):
            self.sequential = True
            self.lab.say(f"{len(configs)} servers do not fit in memory together: one at a time")
        asked = self.order() if prompts is None else list(prompts)
        began, spent = self.lab.clock(), [0.0]
        extend, self.extend = self.extend, False
        block = self.block - 1 if extend else self.block  # breadth's, its baseline paired
        if extend and self.sequential:
            configs = configs[1:]

        def narrow(n: int, cfgs: Sequence[Config], so_far: Sequence[Timed]) -> list[Config]:
            got = self.narrow(asked, n, cfgs, [*self.samples, *so_far], began, spent)
            return [c for c in got if c != self.baseline] if extend else got

        self.samples += rounds(self.lab, configs, asked, self.tokens or self.max_tokens,
                               block, self.sequential,
                               again=lambda: self.lab.clock() < self.deadline,
                               stop=lambda: self.lab.clock() >= self.deadline,
                               narrow=narrow)
        if not extend:
            self.block += 1
        for e in active:
            e.blocks += 1
            self.judge(e)

    def narrow(self, prompts: Sequence[int], n: int, configs: Sequence[Config],
               seen: Sequence[Timed], began: float, spent: list[float]) -> list[Config]:
        """Before the n-th of a block's `prompts`: the configurations to ask it of (`seen`: the
        timings so far, this block's too). All of them while one prompt of each category not
        measured yet still fits, for all, in the time left; else the baseline and the
        configurations measured best so far on every category asked so far (by their point;
        then the others) while it fits with them. So a block that load makes longer than
        expected ends with every category measured on its best, and one left out of a category
        cannot be picked (missing): under 30% bursts a quarter of the simulated tunes, and two
        of two real ones under a one-core load, ended without summarize. `spent`: the expected
        seconds of what the block asked so far (its pace: the time it took over them)."""
        tokens = self.tokens or self.max_tokens
        have = {self.cats[t.prompt] for t in seen if t.label == self.baseline[0]}
        rest = {self.cats[i] for i in prompts[n:]} - have
        took, left = self.lab.clock() - began, (self.deadline - self.lab.clock()) * SLACK
        pace = max(self.pace, took / spent[0] if spent[0] > 0 else 0.0)

        def need(cfgs: Sequence[Config]) -> float:
            return pace * len(rest) * sum(self.expected(c[0], tokens) for c in cfgs)

        if len(configs) > 2 and rest and need(configs) > left:
            points = {c[0]: self._point(c[0], seen) for c in configs[1:]}
            whole = [c for c in configs[1:]  # every category so far: one left out cannot win
                     if have <= {self.cats[t.prompt] for t in seen if t.label == c[0]}]
            ranked = [*sorted(whole, key=lambda c: -points[c[0]]),
                      *(c for c in configs[1:] if c not in whole)]
            kept = list(configs[:2])
            kept[1] = ranked[0]
            for c in ranked[1:]:
                if need([*kept, c]) <= left:
                    kept.append(c)
            configs = [c for c in configs if c in kept]  # in the block's order
        spent[0] += sum(self.expected(c[0], tokens) for c in configs)
        return list(configs)

    def _point(self, label: str, seen: Sequence[Timed]) -> float:
        """label's speedup so far at best (0 where it has no pair yet), for ranking only: each
        of its requests with all the outside load it ran beside taken out (lab.LOADED takes
        out half), so one that ran beside a burst is not left out for it."""
        best = [_unloaded(t) if t.label == label else t for t in seen]
        pairs = intervals.pair(best, label, self.baseline[0])
        got = intervals.paired_speedup(pairs, self.cats, self.weights, rounds=1,
                                objective=self.objective) if pairs else None
        return got.point if got is not None else 0.0

    def missing(self, e: Contender) -> set[str]:
        """The categories of the traffic e has no pair in."""
        return {c for c, n in self.per_category(e).items() if n == 0}

    def pairs(self, e: Contender) -> intervals.Pairs:
        kept, e.discarded = intervals.plausible(
            intervals.pair(self.samples, e.label, self.baseline[0]), e.bound)
        return intervals.calm(kept)

    def judge(self, e: Contender) -> None:
        pairs = self.pairs(e)
        e.interval = intervals.paired_speedup(pairs, self.cats, self.weights, poolable=e.poolable,
                                       objective=self.objective)
        e.drafted = sum(s.spec.drafted for ps in pairs.values() for s, _ in ps)

    def figure(self, e: Contender, figure: intervals.Figure) -> Interval | None:
        """e's speedup by another figure than the objective (the report's)."""
        return intervals.paired_speedup(self.pairs(e), self.cats, self.weights, poolable=e.poolable,
                                 objective=figure)

    def categories(self, e: Contender, figure: intervals.Figure | None = None
                   ) -> dict[str, Interval]:
        """e's speedup on each category of the traffic, by the objective (or `figure`)."""
        pairs = self.pairs(e)
        out = {}
        for cat in self.lab.workload.categories:
            if self.weights.get(cat, 0.0) <= 0:
                continue  # not in the traffic tuned for
            got = intervals.paired_speedup(pairs, self.cats, self.weights, only=cat,
                                    poolable=e.poolable, objective=figure or self.objective)
            if got is not None:
                out[cat] = got
        return out

    def breadth(self, lead: Contender) -> None:
        """Before any other candidate: the baseline and `lead` (the incumbent) on one prompt of
        each kind of the traffic (a block of its own, cut at the budget's end like any: a kind
        it did not reach is said, and unmeasured). Where one full-length round does not fit,
        shorter requests (admit's rule)."""
        left = (self.deadline - self.lab.clock()) * SLACK
        self._shorten([lead], left)
        if self.cost([lead], self.kinds) > left:
            self._not_measured(lead, left, self.cost([lead], self.kinds))
            self.stopped = "budget"
            return
        expected, began = self.cost([lead], self.kinds), self.lab.clock()
        self.broad = self.prompts(self.kinds)
        self.measure([lead], self.broad)
        if expected > 0:
            self.paced((self.lab.clock() - began) / expected)
        asked = {self.cats[t.prompt] for t in self.samples if t.label == lead.label}
        if self.missing(lead) - asked:
            self.lab.say(f"{', '.join(sorted(self.missing(lead) - asked))} not measured: the "
                         "budget had no room for it (a longer --budget measures it)")
        if self.missing(lead) & asked:
            self.lab.say(f"{', '.join(sorted(self.missing(lead) & asked))}: no pair kept "
                         "(above the physical bound or disturbed by outside load): asked again "
                         "in the next block")
        if self.lab.clock() >= self.deadline:
            self.stopped = "budget"

    def _shorten(self, out: Sequence[Contender], left: float) -> None:
        """The first block's request length: max_tokens, shorter (MIN_TOKENS at least) only
        where one round of the categories of `out` and the baseline does not fit in `left`."""
        self.tokens = self.max_tokens
        while self.tokens > MIN_TOKENS and self.cost(out, self.kinds) > left:
            self.tokens = max(MIN_TOKENS, self.tokens - 8)
        if self.tokens < self.max_tokens:
            self.lab.say(f"{self.tokens} tokens a request: a full-length round of the "
                         "categories does not fit in the budget (a short reply's speedup "
                         "is not a long one's; a longer --budget measures full length)")

    def run(self, entries: list[Contender], leader: Contender | None = None,
            blocks: int | None = None) -> Contender:
        """Measure until settled, the budget is spent or `blocks` more blocks ran; returns the
        leader (the first entry unless beaten)."""
        lead = leader or entries[0]
        active = [e for e in entries if not e.dropped]  # still in the race
        ran = 0
        while active and (blocks is None or ran < blocks):
            now, prompts = self.admit(active, lead)  # what this block measures
            active = [e for e in active if not e.dropped]
            if not now:
                self.stopped = "budget"
                break
            expected = self.cost(now, len(prompts), extend=self.extend) / self.pace
            began = self.lab.clock()
            self.measure(now, prompts)
            if expected > 0:
                self.paced((self.lab.clock() - began) / expected)
            ran += 1
            lead = self.leader([lead, *entries])
            for e in now:
                if e is not lead and self.hopeless(e, lead):
                    e.dropped = self._hopeless(e, lead)
                    self.lab.say(f"{e.label}: {e.dropped}")
            active = [e for e in active if not e.dropped]
            if lead not in active:
                active.insert(0, lead)
            if min([lead.blocks, *(e.blocks for e in active if e.blocks)]) < MIN_BLOCKS:
                continue
            if self.judged(lead) and all(e.blocks and _top(e) < 1 + self.margin
                                         for e in active):
                self.stopped = "decided"  # no top reaches the baseline plus the margin
                break
            rivals = [e for e in active if e is not lead and not self.within(e, lead)]
            if not rivals and lead.interval is not None and self.judged(lead) \
                    and lead.interval.half_width <= self.precision:  # one request a category:
                # no width, whatever its point (cpu-demo at 4.5 tok/s stopped at +-2%); two: a
                # bootstrap of three values
                self.stopped = "precision"
                break
            if self.lab.clock() >= self.deadline:
                self.stopped = "budget"
                break
        return lead

    def paced(self, ratio: float) -> None:
        """A block took `ratio` times its expectation: the pace the next blocks expect is the
        mean over the blocks so far and the start's (quiet: 1). One block under 30% bursts ran
        1.1-1.9 times its expectation, the next as likely nearer 1: its ratio alone, 1.8 after
        breadth's block, kept the screen to one candidate a block (each asking the baseline
        again) and left no candidate its three requests a kind."""
        if not self.paces:
            self.paces.append(self.pace)
        self.paces.append(min(3.0, max(1.0, ratio)))
        self.pace = sum(self.paces) / len(self.paces)

    def __post_init__(self) -> None:
        """Where outside load disturbed the timings before the race (BUSY cores or more
        beside a request), the first block's pace from them: their time over what their
        medians expect. Quiet, 1 (their skew alone kept a candidate out of cpu-demo's)."""
        if any(t.busy >= BUSY for t in self.prior):
            want = sum(self._expected(t.label, t.tokens, self.prior) for t in self.prior)
            took = sum(t.wall_s or t.seconds for t in self.prior)
            if want > 0:
                self.pace = min(3.0, max(1.0, took / want))

    def expected(self, label: str, tokens: int, unseen: float | None = None) -> float:
        return self._expected(label, tokens, self.samples, unseen or self.unseen)

    def _expected(self, label: str, tokens: int, samples: Sequence[Timed],
                  unseen: float = UNSEEN) -> float:
        """Seconds a request of `tokens` a turn takes on `label`, as the machine is now: the
        median decode time per token of its own timings so far, else the baseline's (`unseen`
        times slower), over the workload's turns, and the mean time beside decoding (the
        prompts' prefill, which differs between prompts far more than decoding: a mean over a
        block's prompts is the block's)."""
        mine = [t for t in samples if t.label == label and t.tokens]
        slower = 1.0
        if not mine:
            mine = [t for t in [*self.samples, *self.prior]
                    if t.label == self.baseline[0] and t.tokens]
            slower = 1.0 if label == self.baseline[0] else unseen
        if not mine:
            return 0.0
        per = slower * intervals.quantile([t.per_token for t in mine], 0.5)
        extra = sum(max(0.0, t.wall_s - t.seconds) for t in mine) / len(mine)
        return per * self.length(tokens) + extra

    def length(self, tokens: int) -> float:
        """Tokens a request of `tokens` a turn answers, a conversation's turns summed: the
        mean over the race's requests so far (a model that answers at its own length, 160
        tokens where 64 are asked, made every block 2.5 times its expectation and its pace
        the blocks' after it), else `tokens` a turn."""
        got = [t.tokens for t in self.samples if t.tokens]
        return sum(got) / len(got) if got else tokens * self.turns

    @property
    def turns(self) -> float:
        """Requests per prompt of the traffic (a conversation's turns), on average."""
        order = self.order()
        prompts = self.lab.workload.prompts
        return sum(len(prompts[i].turns) for i in order) / len(order) if order else 1.0

    def cost(self, entries: Sequence[Contender], prompts: int,
             unseen: float | None = None, extend: bool = False) -> float:
        """Expected seconds of a block of `entries` (and the baseline) on `prompts` prompts,
        the servers not up yet started (one not measured yet `unseen` times slower than the
        baseline). `extend`: going on with breadth's block, the baseline not asked again."""
        labels = [*([] if extend else [self.baseline[0]]), *(e.label for e in entries)]
        fresh = len(labels) if self.sequential else sum(1 for e in entries if e.blocks == 0)
        return self.pace * (prompts * sum(self.expected(lbl, self.tokens or self.max_tokens,
                                                        unseen) for lbl in labels)
                            + fresh * self.start_s)

    def admit(self, active: list[Contender], lead: Contender) -> tuple[list[Contender], list[int]]:
        """What the next block measures within the time left. Successive halving, cheap breadth
        first: while challengers are not measured yet and the leader has a request of every
        kind (breadth's), a block screens them: those not measured yet, one prompt of each
        kind, beside the baseline and not the leader (its next rounds are its confirmation,
        kept by `reserve`); a screen's one request a kind is an estimate for ranking only, no
        claim. Then the leader and the measured ones (best point first), on as many prompts as
        fit in SHARE of the time left (one of each category at least), each while one round of
        the categories still fits with it. Every block keeps the seconds for whoever leads
        then, or would lead after it (the best point of the block), to reach MIN_REQUESTS
        requests of each kind (`reserve`): exploring stops where confirming the leader is all
        that fits. The first block with the leader has a rival wherever one fits as fast as
        the baseline (a race of one finds nothing: at 4.5 tok/s, cpu-demo on a slower CPU,
        UNSEEN left n-gram out of every first block). A challenger left out waits for the next
        block; one that could not fit even beside the leader alone is said and not measured;
        where not even the leader's round fits, nothing is measured."""
        left = (self.deadline - self.lab.clock()) * SLACK
        cats = self.kinds
        out = [lead] if lead in active else active[:1]
        if self.block == 0:  # a budget too short for one full-length round: shorter requests
            self._shorten(out, left)
        new = [e for e in active if e not in out and not e.blocks]
        seen = sorted((e for e in active if e not in out and e.blocks), key=_point,
                      reverse=True)
        self.unseen = UNSEEN
        if new and out[0].blocks and not self.missing(out[0]):  # a screen of the new ones
            screen = self.screen(new, out[0], left, extend=not seen and self.block == 1
                                 and bool(self.broad))
            if screen:
                return screen, (self.broad if self.extend else self.prompts(cats))
            new = []  # confirming the leader is all that fits: no more exploring
        if self.cost(out, cats) > left and out[0].blocks and not self.judged(out[0]):
            return self.top_up(out, left)
        if self.cost(out, cats) > left:
            for e in active:
                if not e.blocks and not e.dropped:
                    self._not_measured(e, left, self.cost([e], cats))
            return [], []
        return self.rivals(out, new, seen, left)

    def rivals(self, out: list[Contender], new: Sequence[Contender],
               seen: Sequence[Contender], left: float) -> tuple[list[Contender], list[int]]:
        """admit's block of the leader (`out`) and the challengers that fit beside it: those
        not measured yet (`new`), then the measured ones (`seen`, best point first)."""
        cats = self.kinds
        first = not seen  # no rival measured yet (breadth's block had the leader alone)
        if not self.judged(out[0]):  # the leader's interval first: a rival its point has
            # behind by more than the margin waits (ranking only: it is not dropped)
            seen = [e for e in seen if _point(e) * (1 + self.margin) >= _point(out[0])]
        for e in [*new, *seen]:
            if (self.cost([*out, e], cats) + self.reserve(out[0], [*out, e])) \
                    * (1.0 if self.judged(out[0]) else self.headroom) <= left:
                out.append(e)
            elif first and len(out) == 1 and self.cost([*out, e], cats, 1.0) \
                    + self.reserve(out[0], [*out, e], 1.0) <= left:
                self.unseen = 1.0  # the block's narrowing expects as much
                out.append(e)
            elif not e.blocks and self.cost([*out[:1], e], cats) > left:
                self._not_measured(e, left, self.cost([*out[:1], e], cats))
        n = self.fitting(out, left / SLACK * SHARE, cats)
        return out, self.prompts(n)

    def top_up(self, out: list[Contender], left: float) -> tuple[list[Contender], list[int]]:
        """The leader alone, short of its interval, where a round of the kinds no longer fits:
        a prompt of each kind it has fewer than MIN_REQUESTS pairs of (the prompt of the kind
        it has fewest pairs on: a disturbed pair on a prompt with a calm one is not counted),
        where they fit at the machine's median pace (the blocks' pace, re-asks under bursts
        among it, left 62 s unused where a round took 52 s). Nothing where even that does not
        fit."""
        lead = out[0]
        have = self.per_category(lead)
        pairs = self.pairs(lead)
        picks: dict[str, int] = {}
        for i in self.order():
            cat = self.cats[i]
            if have.get(cat, MIN_REQUESTS) >= MIN_REQUESTS:
                continue
            if cat not in picks or len(pairs.get(i, [])) < len(pairs.get(picks[cat], [])):
                picks[cat] = i
        asked = list(picks.values())
        if asked and self.cost(out, len(asked)) / self.pace <= left:
            return out[:1], asked
        return [], []

    def screen(self, new: Sequence[Contender], lead: Contender, left: float,
               extend: bool) -> list[Contender]:
        """The challengers not measured yet that a screen block has room for (`admit`), one
        prompt of each kind, and the reserve for whoever leads after it. `extend`: the first
        screen goes on with breadth's block, on its prompts, paired with its baseline (the
        baseline not asked again: at 4.5 tok/s, after breadth, a round of n-gram with the
        baseline no longer fit in a 180 s tune, n-gram's three requests alone did)."""
        cats = self.kinds
        out: list[Contender] = []
        pays = _point(lead) > 1 + self.margin
        for e in new:
            if (self.cost([*out, e], cats, extend=extend) + self.reserve(lead, [*out, e])) \
                    * self.headroom <= left \
                    or (not out and not pays and self.cost([e], cats, extend=extend) <= left):
                out.append(e)  # (a leader that does not pay has nothing to confirm: a first
                # rival is worth more than its interval)
            elif not out and self.cost([e], cats, 1.0, extend=extend) \
                    + self.reserve(lead, [e], 1.0) <= left:
                self.unseen = 1.0  # the block's narrowing expects as much
                out.append(e)
            elif self.cost([e], cats, extend=extend) > left:
                self._not_measured(e, left, self.cost([e], cats, extend=extend))
        self.extend = extend and bool(out)
        return out

    @property
    def headroom(self) -> float:
        """What a block's expectation is stretched by beyond its pace while the leader has no
        interval: HEADROOM where the last block ran as expected, less where its pace already
        stretches every expectation (a block after bursts: the two stacked kept a screen to
        one candidate of six, each a block of its own, and no interval in the budget)."""
        return max(1.0, HEADROOM / self.pace)

    def reserve(self, lead: Contender, block: Sequence[Contender] = (),
                unseen: float | None = None) -> float:
        """Seconds to keep after a block of `block` for the one that leads then to reach
        MIN_REQUESTS paired requests of each kind (its interval: the decision's): `lead` or
        any of the block (one may take the lead), whichever needs most; each the rounds it
        still lacks after the block, a round of the kinds with the baseline. Two default
        tunes that raced seven candidates on one request each decided opposite things (issue
        59); a challenger waits, or is said not measured, rather than leave the pick without
        an interval."""
        def need(e: Contender) -> float:
            have = min(self.per_category(e).values(), default=0) + (1 if e in block else 0)
            fresh = not e.blocks
            return max(0, MIN_REQUESTS - have) * self.cost([e], self.kinds,
                                                           1.0 if fresh else unseen)

        pays = lead.interval is None or _point(lead) > 1 + self.margin
        return max([need(e) for e in block if e is not lead]
                   + ([need(lead)] if pays else []), default=0.0)

    def unmeasured(self, entries: Sequence[Contender]) -> None:
        """At the end: each challenger that waited for a block the budget never had room for
        is said and listed as not measured."""
        left = (self.deadline - self.lab.clock()) * SLACK
        for e in entries:
            if not e.blocks and not e.dropped:
                self._not_measured(e, left, self.cost([e], self.kinds))

    def _not_measured(self, e: Contender, left: float, need: float) -> None:
        e.dropped = (f"not measured: {max(left, 0.0):.0f} s of the budget were left and a "
                     f"block with it takes about {need:.0f} s; a longer --budget measures it")
        self.lab.say(f"{e.label}: {e.dropped}")

    def final(self, entries: Sequence[Contender], lead: Contender) -> Contender:
        """The decision when the race ends: among the leader and the configurations still in
        it (not shown unable to win), the best against the leader on the prompts and blocks
        both measured (a point measured on other prompts is no comparison: one edit prompt
        gave ngram-mod 1.91x where the chain, on more prompts, had 1.87x), the leader on a
        tie. Where either has fewer than MIN_REQUESTS requests of a category (no interval: one
        request's burst moves it more than the margin), the challenger must beat the leader by
        the margin: under 30% bursts the chain, a point or two ahead so, took 4 in 60 tunes
        from n-gram, which the law has 8% faster. The leader rule (surely ahead by the margin)
        keeps the race's comparisons steady; once the budget is spent, the best measured is the
        best answer there is."""
        best, top, gap = lead, 1.0, self.missing(lead)
        for e in entries:
            if e is lead or e.interval is None or not e.drafted or e.blocks < MIN_BLOCKS \
                    or e.interval.point > e.bound or e.dropped.startswith("cannot win") \
                    or not self.missing(e) <= gap:
                continue
            rel = self.versus(e, lead)
            if rel is None:
                continue
            need = 1.0 if self.judged(e) and self.judged(lead) else 1 + self.margin
            if rel.point > max(top, need):
                best, top = e, rel.point
        return best

    def slows(self, e: Contender) -> dict[str, Interval]:
        """The categories of the workload e surely slows by the objective (tuned.slowed): its
        interval there wholly below 1.00x on MIN_REQUESTS requests or more; on fewer, its
        figure under 1 by the margin. One request of a category is all a provisional tune may
        have of it: a draft measured 0.78x on the one document question a 240 s tune had room
        for was picked for all traffic (tests/test_objective.py), where its interval, no wider
        than its point, was not counted."""
        return {c: iv for c, iv in self.categories(e).items()
                if tuned.slowed(iv.point, iv.high, iv.n, self.margin)}

    def fair(self, entries: Sequence[Contender], lead: Contender) -> Contender | None:
        """The pick where `lead` (final's) slows a category: the best, as final() judges
        them, of the configurations that slow none and beat the baseline by the margin (by
        their point); None where none does (speculation off)."""
        ok = [e for e in entries if self.eligible(e, lead) and not self.slows(e)
              and _point(e) > 1 + self.margin]
        return self.final(ok, max(ok, key=_point)) if ok else None

    def eligible(self, e: Contender, lead: Contender) -> bool:
        """e could be picked in `lead`'s stead: measured (a block, drafts made, within the
        physical bound) on every category `lead` was measured on."""
        return e.interval is not None and e.drafted > 0 and e.blocks >= MIN_BLOCKS \
            and e.interval.point <= e.bound and self.missing(e) <= self.missing(lead)

    def versus(self, e: Contender, lead: Contender) -> Interval | None:
        """e's speedup over the leader's on the prompts and blocks both measured."""
        return intervals.relative(self.pairs(e), self.pairs(lead), self.cats, self.weights,
                                  poolable=(e.poolable, lead.poolable), objective=self.objective)

    def hopeless(self, e: Contender, lead: Contender) -> bool:
        """e cannot beat the leader by the margin (by 95% intervals on MIN_SIFT requests of
        each category at least: one request's has no width; a configuration that drafted
        nothing: at once), and is not ahead of it either: one ahead within the margin stays
        for the final pick (an edit tune dropped n-gram at 1.99x [1.98-2.01] behind the
        chain's 1.93x)."""
        if e.interval is None:
            return True
        if e.blocks >= MIN_BLOCKS and e.drafted == 0:
            return True
        if not self.sifted(e):
            return False
        rel = self.versus(e, lead)
        if (rel.point if rel is not None else e.interval.point / max(_point(lead), 1e-9)) > 1:
            return False
        return self.within(e, lead, rel)

    def _hopeless(self, e: Contender, lead: Contender) -> str:
        """Why e left the race, its interval said only from MIN_REQUESTS requests a kind."""
        if not e.drafted:
            return "cannot win: it drafted nothing (the baseline and noise)"
        need = _point(lead) * (1 + self.margin)
        if not self.judged(e):
            return (f"cannot win: on {min(self.per_category(e).values())} requests of each "
                    f"kind it reads {_point(e):.2f}x, far from the {need:.2f}x it needs (no "
                    "interval: dropped to measure the others)")
        return (f"cannot win: its {intervals.CONFIDENCE:.0%} interval reaches {_top(e):.2f}x, "
                f"it needs over {need:.2f}x")

    def within(self, e: Contender, lead: Contender, rel: Interval | None = None) -> bool:
        """e's interval (MIN_SIFT requests of each category at least) cannot beat the leader by
        the margin: the leader's precision settles the race with e still in it. `rel`: e's
        interval against the leader, where the caller has it."""
        if e.interval is None or not self.sifted(e):
            return False
        rel = rel or self.versus(e, lead)
        return e.interval.high <= _point(lead) * (1 + self.margin) or (
            rel is not None and rel.high <= 1 + self.margin)

    def judged(self, e: Contender) -> bool:
        """Whether e has an interval to decide by: MIN_REQUESTS requests of each category at
        least (one request's bootstrap interval is its point; two's, one of three values)."""
        return min(self.per_category(e).values(), default=0) >= MIN_REQUESTS

    def sifted(self, e: Contender) -> bool:
        """Whether e may leave the race as unable to win: MIN_SIFT requests of each category
        (dropping one only stops measuring it; nothing is said or saved of its interval)."""
        return min(self.per_category(e).values(), default=0) >= MIN_SIFT

    def requests(self, e: Contender) -> int:
        """e's paired requests on the category it has fewest of, among those it was measured
        on (0: none): its figure's interval needs MIN_REQUESTS (estimate.backed)."""
        return min((n for n in self.per_category(e).values() if n), default=0)

    def per_category(self, e: Contender) -> dict[str, int]:
        """How many pairs e has in each category of the traffic."""
        out = {c: 0 for c, w in self.weights.items() if w > 0}
        for i, ps in self.pairs(e).items():
            if self.cats[i] in out:
                out[self.cats[i]] += len(ps)
        return out

    def leader(self, entries: Sequence[Contender]) -> Contender:
        lead = entries[0]
        gap = self.missing(lead)
        for e in entries[1:]:
            if e is lead or e.interval is None or e.drafted == 0 or e.blocks < MIN_BLOCKS \
                    or e.interval.point > e.bound:  # above the physical bound: noise
                continue
            mine = self.missing(e)
            if not mine <= gap:  # not measured on a category the lead has
                continue
            if mine < gap:  # the lead's figure leaves out a category
                lead, gap = e, mine
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
                lead, gap = e, mine
        return lead

    def drift(self) -> float:
        return intervals.drift(self.samples, self.baseline[0])


def _unloaded(t: Timed) -> Timed:
    """A request with all the outside load it ran beside taken out (for ranking only)."""
    share = 1 - min(t.busy, 1.0)
    return replace(t, seconds=t.seconds * share, wall_s=t.wall_s * share,
                   ttft_s=t.ttft_s * share, busy=0.0)


def _point(e: Contender) -> float:
    return e.interval.point if e.interval else 0.0


def _top(e: Contender) -> float:
    return e.interval.high if e.interval else 0.0
