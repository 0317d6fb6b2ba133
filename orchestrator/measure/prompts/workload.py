"""The traffic to tune and bench for: prompts with categories, the mix of categories, concurrency.

The objective is the workload's decode throughput: tokens over time, each category weighted by
its share of the requests (`--mix code=0.6,chat=0.4`; by default the categories weigh alike), not
a median of prompts. Per request i of category c (n_i tokens in t_i seconds):

    throughput = sum_c w_c * mean_i(n_i) / sum_c w_c * mean_i(t_i)

and a configuration's speedup is its throughput over the baseline's on the same prompts.
`--prompts FILE` brings the user's own prompts: OpenAI chat lines, MT-Bench / Spec-Bench
questions, ShareGPT conversations or text lines (measure/prompts/formats.py tells them apart).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from specctl.orchestrator.errors import ProfileError
from specctl.orchestrator.files import read_text
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.measure.prompts import formats

Objective = Literal["latency", "decode", "throughput"]  # what tune and bench rank by (intervals)
OBJECTIVES: tuple[Objective, ...] = get_args(Objective)
Figure = Literal["latency", "decode", "throughput", "ttft"]  # an objective's, or the first token's
USER = "user"  # the category of prompts from a file that names none
MAX_FILE = 16 << 20
BUCKETS = ((0, 256, "<256"), (256, 1024, "256-1k"), (1024, 4096, "1k-4k"),
           (4096, math.inf, ">=4k"))  # prompt tokens (as the server counts them): from, under, name


@dataclass(frozen=True)
class Prompt:
    """One request of the workload, or one conversation: `text` is the last user message (what
    the router's classifier reads); `earlier` the user's turns before it, each sent in order
    with the model's own earlier replies, as a client would. `max_tokens`: this prompt's answer
    length where the source gave one (a recorded request), else the run's."""

    category: str
    text: str
    earlier: tuple[str, ...] = ()
    system: str | None = None
    max_tokens: int | None = None

    @property
    def turns(self) -> tuple[str, ...]:
        """The user's messages in order, the last one `text`."""
        return (*self.earlier, self.text)


@dataclass(frozen=True)
class Workload:
    prompts: tuple[Prompt, ...]
    mix: Mapping[str, float] = field(default_factory=dict)  # category -> share; {} = alike

    @property
    def categories(self) -> list[str]:
        return list(dict.fromkeys(p.category for p in self.prompts))

    def weights(self) -> dict[str, float]:
        cats = self.categories
        given = {c: self.mix.get(c, 0.0) for c in cats} if self.mix else {c: 1.0 for c in cats}
        total = sum(given.values())
        return {c: w / total for c, w in given.items()}

    def by_category(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for p in self.prompts:
            out.setdefault(p.category, []).append(p.text)
        return out

    def describe(self) -> str:
        w = self.weights()
        return ", ".join(f"{c} {w[c]:.0%}" for c in self.categories)


def parse_mix(text: str | None) -> dict[str, float]:
    """'code=0.6,chat=0.4' -> shares (they need not sum to 1: they are normalised)."""
    if not text:
        return {}
    out: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        try:
            share = float(value)
        except ValueError:
            share = -1.0
        if not sep or not name.strip() or not 0 <= share < float("inf") or share != share:
            raise ProfileError(f"--mix takes CATEGORY=SHARE,... (e.g. code=0.6,chat=0.4), not "
                               f"{part!r}")
        out[name.strip()] = share
    if not any(out.values()):
        raise ProfileError("--mix: at least one category needs a share above 0")
    return out


def from_suites(suites: Mapping[str, Sequence[Prompt | str]], mix: Mapping[str, float]
                ) -> Workload:
    """The shipped suites; with a mix, only the categories it names (share above 0)."""
    wanted = [c for c in suites if not mix or mix.get(c, 0) > 0]
    unknown = set(mix) - set(suites)
    if unknown:
        raise ProfileError(f"--mix names {', '.join(sorted(unknown))}; the categories are "
                           f"{', '.join(suites)} (or bring your own with --prompts FILE)")
    return Workload(tuple(t if isinstance(t, Prompt) else Prompt(c, t)
                          for c in wanted for t in suites[c]), dict(mix))


def from_file(path: Path, mix: Mapping[str, float], per_category: int,
              say: Say | None = None) -> Workload:
    """The user's prompts (a format of measure/prompts/formats.py), at most `per_category` of each
    category, sampled with a fixed seed; `say` gets a line where the format was a guess."""
    parsed = formats.parse(path, read_text(path, MAX_FILE))
    for note in parsed.notes:
        if say is not None:
            say(note)
    prompts = [Prompt(c.category or USER, c.turns[-1], c.turns[:-1], c.system, c.max_tokens)
               for c in parsed.conversations]
    by_cat: dict[str, list[Prompt]] = {}
    for p in prompts:
        by_cat.setdefault(p.category, []).append(p)
    unknown = set(mix) - set(by_cat)
    if unknown:
        raise ProfileError(f"--mix names {', '.join(sorted(unknown))}, not in {path} (its "
                           f"categories: {', '.join(by_cat)})")
    return Workload(tuple(sample(by_cat, per_category)), dict(mix))


def sample(by_cat: Mapping[str, Sequence[Prompt]], per_category: int) -> list[Prompt]:
    """At most `per_category` prompts of each category, a fixed sample: the same prompts in
    tune and bench."""
    rng = random.Random(0)
    return [q for ps in by_cat.values()
            for q in (rng.sample(list(ps), per_category) if len(ps) > per_category else ps)]


@dataclass(frozen=True)
class Timing:
    """One measured request: its category, tokens and decode seconds."""

    category: str
    tokens: int
    seconds: float


def throughput(requests: Sequence[Timing], weights: Mapping[str, float]) -> float:
    """Weighted decode throughput (tokens/s) of the requests, by their category's share."""
    num = den = 0.0
    for cat, w in weights.items():
        mine = [r for r in requests if r.category == cat]
        if not mine or w <= 0:
            continue
        num += w * sum(r.tokens for r in mine) / len(mine)
        den += w * sum(r.seconds for r in mine) / len(mine)
    return num / den if den > 0 else 0.0


def throughput_ratio(spec: Sequence[Timing], base: Sequence[Timing], weights: Mapping[str, float],
            ) -> float:
    b = throughput(base, weights)
    return throughput(spec, weights) / b if b > 0 else 0.0
