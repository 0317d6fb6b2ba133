"""Every served request is a measurement: which of a model's settings serves a request, by its
kind, its length and the load, learned from the engine's own timings of the requests served,
with tune's figures as the prior.

Per setting, kind and load (the requests at once as it started: `bucket`), the last WINDOW
served requests' decode seconds per answer token, and per setting and load their prefill
seconds per prompt token (the engine's own timings where its adapter reads them, else the
gateway's clock). With MIN or more of both a setting's and no draft's at the request's kind and
load, the request's time on each, T = P f + N d (P its prompt's tokens, N its answer's: as
measure/route/costs.py reads them), comes with an interval (each mean's 95% t interval), and a
setting serves where it is surely faster than no draft (its T's top under no draft's point,
its point MARGIN under it): the fastest of those; else no draft. Fewer than MIN is no
interval: until the live figures are there, tune's figure for the kind decides (`Prior`: the
route's setting for the kind, measured alone, so at load 1 only; a model not tuned at all
serves its plan's own setting at load 1, as it would without the router); under load with nothing
measured there, no draft serves (a draft's verification batches of several requests are what
a machine runs slowest: four users on cpu-demo, 0.69x of no draft).

Exploring, alone only: a request of a kind where the setting that looks best (tune's, else the
model's own) or no draft lacks MIN live measurements goes to the one lacking them, one early
and then about EXPLORE of the kind's requests: the cost is bounded, MIN requests of each, and
an interval comes from requests of the kind itself, not of another. A choice that
changes is said, with the figures (`Choice.why`, the log and `status`).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from specctl.orchestrator.measure.lab.engine import MARGIN
from specctl.orchestrator.measure.route.classify import Facts

K = TypeVar("K")
OFF = "off"
WINDOW = 32  # served requests kept per setting, kind and load: old ones leave as traffic moves
MIN = 3  # a setting's own measurements before its figures decide: no interval from fewer
EXPLORE = 0.1  # a kind explores its Nth request at load 1 once it has had (N - 1) / EXPLORE:
# one early, then about one in ten, MIN of each at the most (200 requests of six kinds explored
# 18 in all: 9%)
FIRST = 2  # a kind's requests served before the first exploration (one odd request decides none)
CHARS_PER_TOKEN = 3.5  # a prompt's characters per token before tune or traffic says
BUCKETS = ((1, "1"), (2, "2"), (4, "3-4"), (math.inf, "5+"))
_T95 = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31, 10: 2.26}


def bucket(load: int) -> str:
    """The load a request ran at, as the figures are kept: '1', '2', '3-4', '5+'."""
    return next(name for top, name in BUCKETS if load <= top)


@dataclass(frozen=True)
class Estimate:
    point: float
    low: float
    high: float
    n: int


def estimate(values: Sequence[float]) -> Estimate | None:
    """The mean with its 95% t interval; None from fewer than MIN values."""
    n = len(values)
    if n < MIN:
        return None
    mean = statistics.fmean(values)
    half = _T95.get(n, 2.0) * statistics.stdev(values) / math.sqrt(n)
    return Estimate(mean, max(mean - half, 0.0), mean + half, n)


@dataclass(frozen=True)
class Served:
    """What one served request tells: its setting, kind and load, its prompt's tokens and
    their prefill seconds, its answer's tokens and their decode seconds (after the first)."""

    setting: str
    kind: str
    load: int
    prompt_tokens: int
    prefill_s: float | None
    tokens: int
    decode_s: float | None


@dataclass(frozen=True)
class Prior:
    """Tune's figure for a kind: the setting the route gives it and its speedup over no draft
    there, measured alone (None: no interval: one request, or none)."""

    setting: str
    speedup: float
    low: float | None = None


@dataclass(frozen=True)
class Choice:
    setting: str
    why: str
    exploring: bool = False


@dataclass
class Learned:
    """One model's figures and choices. `settings`: its members (no draft among them);
    `priors`: tune's figure per kind; `main`: the setting to explore where tune said nothing
    (the model's own plan)."""

    settings: tuple[str, ...]
    priors: Mapping[str, Prior] = field(default_factory=dict)
    main: str = OFF
    # tune's choice for a request of a kind it measured (the route's: its kind's setting, or
    # the one its length is predicted faster on): what serves before the live figures do
    prior: Callable[[Facts], str] | None = None
    explore: bool = True  # the profile's [gateway] explore
    decode: dict[tuple[str, str, str], deque[float]] = field(default_factory=dict)
    prefill: dict[tuple[str, str], deque[float]] = field(default_factory=dict)
    answers: dict[str, deque[int]] = field(default_factory=dict)
    chars: dict[str, deque[float]] = field(default_factory=dict)  # characters per prompt token
    seen: Counter[tuple[str, str]] = field(default_factory=Counter)
    explored: Counter[tuple[str, str]] = field(default_factory=Counter)
    chosen: dict[tuple[str, str], str] = field(default_factory=dict)
    why: dict[tuple[str, str], str] = field(default_factory=dict)  # each choice's last reason
    added: int = 0  # served requests added (the figures are saved when it moves)

    # -- what is served tells ------------------------------------------------------------
    def add(self, served: Served, chars: int = 0) -> None:
        self.added += 1
        b = bucket(served.load)
        if served.decode_s is not None and served.tokens > 1:
            self._keep(self.decode, (served.setting, served.kind, b),
                       served.decode_s / (served.tokens - 1))
        if served.prefill_s is not None and served.prompt_tokens > 0:
            self._keep(self.prefill, (served.setting, b), served.prefill_s / served.prompt_tokens)
        if served.tokens > 0:
            self.answers.setdefault(served.kind, deque(maxlen=WINDOW)).append(served.tokens)
        if chars > 0 and served.prompt_tokens > 0:
            self._keep(self.chars, served.kind, chars / served.prompt_tokens)

    def keep_from(self, before: Learned) -> None:
        """What `before` (the same model's figures, before a retune) measured."""
        self.decode, self.prefill = before.decode, before.prefill
        self.answers, self.chars = before.answers, before.chars
        self.seen, self.explored = before.seen, before.explored

    @staticmethod
    def _keep(cells: dict[K, deque[float]], key: K, value: float) -> None:
        if math.isfinite(value) and value >= 0:
            cells.setdefault(key, deque(maxlen=WINDOW)).append(value)

    # -- the choice ----------------------------------------------------------------------
    def choose(self, facts: Facts, load: int, say: Callable[[str], None] | None = None
               ) -> Choice:
        """The setting of a request of `facts` that starts beside `load` - 1 others."""
        b, kind = bucket(load), facts.kind
        self.seen[(kind, b)] += 1
        found = self._decide(facts, b)
        key = (kind, b)
        if not found.exploring:
            self.why[key] = found.why
        if not found.exploring and self.chosen.get(key) != found.setting:
            if key in self.chosen and say is not None:
                say(f"{kind} at load {b}: {found.setting} now (was {self.chosen[key]}): "
                    f"{found.why}")
            self.chosen[key] = found.setting
        return found

    def _decide(self, facts: Facts, b: str) -> Choice:
        kind = facts.kind
        off = self.time(OFF, facts, b)
        live = [(s, t) for s in self.settings if s != OFF
                if (t := self.time(s, facts, b)) is not None]
        explore = self._explore(facts, b, off, live)
        if explore is not None:
            return explore
        if off is not None and live:
            sure = [(s, t) for s, t in live if t.high < off.point and
                    t.point * (1 + MARGIN) < off.point]
            if sure:
                s, t = min(sure, key=lambda st: st[1].point)
                return Choice(s, f"{s} {_secs(t)} against no draft's {_secs(off)} on {kind}")
            return Choice(OFF, f"nothing is surely faster than no draft on {kind} at load {b} "
                          f"({_secs(off)}; {', '.join(f'{s} {_secs(t)}' for s, t in live)})")
        prior = self.priors.get(kind)
        if b == "1" and prior is not None and prior.setting in self.settings:
            setting = self.prior(facts) if self.prior is not None else prior.setting
            interval = "one request: no interval" if prior.low is None else \
                f"its interval's bottom {prior.low:.2f}x"
            return Choice(setting, f"tune's figure for {kind}: {prior.setting} "
                          f"{prior.speedup:.2f}x ({interval}); {MIN} served requests of each "
                          "decide from here")
        if b == "1" and not self.priors and self.main != OFF and self.main in self.settings:
            return Choice(self.main, f"the plan's own setting (not tuned: no figure); {MIN} "
                          "served requests of it and of no draft decide from here")
        where = "alone" if b == "1" else f"at load {b}"
        return Choice(OFF, f"no draft until a setting is measured on {kind} {where}")

    def _explore(self, facts: Facts, b: str, off: Estimate | None,
                 live: list[tuple[str, Estimate]]) -> Choice | None:
        """The request, sent to the setting that looks best or to no draft, whichever lacks
        MIN live measurements on its kind (alone, within EXPLORE of the kind's requests)."""
        kind, key = facts.kind, (facts.kind, b)
        if not self.explore or b != "1" or self.seen[key] <= FIRST or \
                self.explored[key] >= 1 + math.floor(EXPLORE * (self.seen[key] - FIRST - 1)):
            return None  # (whole explorations: unfloored, the second came on the next request)
        prior = self.priors.get(kind)
        candidate = prior.setting if prior is not None and prior.setting != OFF else self.main
        if candidate == OFF or candidate not in self.settings:
            return None
        # at load 1, what tune measured serves, else (not tuned) the plan's own
        served = candidate if prior is not None or not self.priors else OFF
        known = {s for s, _ in live} | ({OFF} if off is not None else set())
        lacking = next((s for s in (candidate, OFF) if s != served and s not in known), None)
        if lacking is None:
            return None
        self.explored[key] += 1
        n = len(self.decode.get((lacking, kind, b), ()))
        return Choice(lacking, f"exploring {kind}: {lacking} has {n} of the {MIN} served "
                      f"requests its figures need ({self.explored[key]} of the kind's "
                      f"{self.seen[key]} requests explored, at most {EXPLORE:.0%})",
                      exploring=True)

    def time(self, setting: str, facts: Facts, b: str) -> Estimate | None:
        """T = P f + N d of the request on `setting` at load `b`, with its interval (None:
        fewer than MIN of its decode or prefill figures)."""
        d = estimate(self.decode.get((setting, facts.kind, b), ()))
        f = estimate(self.prefill.get((setting, b), ()))
        if d is None or f is None:
            return None
        p, n = self.tokens(facts)
        return Estimate(p * f.point + n * d.point, p * f.low + n * d.low,
                        p * f.high + n * d.high, min(d.n, f.n))

    def tokens(self, facts: Facts) -> tuple[float, float]:
        """The request's P (its characters over its kind's characters per token) and N (its
        max_tokens, at most the kind's usual answer where served ones show it)."""
        cpt = self.chars.get(facts.kind)
        p = facts.chars / (statistics.median(cpt) if cpt else CHARS_PER_TOKEN)
        seen = self.answers.get(facts.kind)
        usual = statistics.median(seen) if seen else None
        n = facts.max_tokens if usual is None else usual if facts.max_tokens is None else \
            min(facts.max_tokens, usual)
        return p, float(n or 256)


    def rows(self) -> list[dict[str, object]]:
        """What `status` shows: per kind and load served, the setting chosen, the requests and
        those explored, each setting's decode speed there (tokens/s, from its mean) and why."""
        out: list[dict[str, object]] = []
        for (kind, b), n in sorted(self.seen.items()):
            speeds = {s: round(1 / statistics.fmean(v), 2) for s in self.settings
                      if (v := self.decode.get((s, kind, b))) and statistics.fmean(v) > 0}
            counts = {s: len(self.decode.get((s, kind, b), ())) for s in self.settings}
            out.append({"kind": kind, "load": b, "setting": self.chosen.get((kind, b), OFF),
                        "requests": n, "explored": self.explored[(kind, b)],
                        "tps": speeds, "measured": counts,
                        "why": self.why.get((kind, b), "")})
        return out


def _secs(t: Estimate) -> str:
    return f"{t.point:.2f} s [{t.low:.2f}-{t.high:.2f}] over {t.n}"
