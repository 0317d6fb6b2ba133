"""Saved tuning results, keyed by hardware fingerprint, backend build and both models' SHA-256.

A model's SHA is the one taken when the file arrived (models/digest.py), else computed once and
remembered by (path, size, mtime) in the state dir, so `plan` and `up` find the result without
re-reading gigabytes. A result is validated with the same
model, and held to the same limits as a profile (k 1-32, p-min 0-1), whether fresh or read back:
a file that fails is moved aside and reported in one line, never trusted (its k would go to
argv). No figure carries an interval from fewer than MIN_REQUESTS paired requests of a kind
(`requests`): its low and high are None, fresh or read back (one saved before this rule, with
its bootstrap's interval of no width, is read without it).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, model_validator

from specctl.orchestrator.config.profiles import MAX_COPY_K, PMin
from specctl.orchestrator.contract.plan import NGRAMS, Method, Plan, Step
from specctl.orchestrator.files import (
    inside,
    read_back,
    write_atomic,
)
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.measure.estimates.estimate import MIN_REQUESTS, backed, shown
from specctl.orchestrator.measure.prompts.workload import Figure, Objective
from specctl.orchestrator.measure.results.record import Record
from specctl.orchestrator.models import digest

Ratio = Annotated[float, Field(ge=0, le=1e6)]  # a speedup, tokens/s or seconds: finite
Rate = Annotated[float, Field(ge=0, le=1)]
# a point and its 95% interval (None, None: from fewer than MIN_REQUESTS paired requests)
Span = Annotated[list[Ratio | None], Field(min_length=3, max_length=3)]
Requests = Annotated[int, Field(ge=0, le=1 << 30)]


def _unbacked(record: Record, spans: tuple[str, ...] = ()) -> None:
    """A record without an interval where it rests on fewer than MIN_REQUESTS paired requests
    of a kind (its `requests`; None: saved before they were counted, as saved): low and high
    None, and each of `spans`' (Span dicts) too. After validation, as a frozen record's own
    (a before-validator would hand strict JSON's arrays on as lists, not tuples)."""
    got = getattr(record, "requests", None)
    if got is None or backed(got):
        return
    for name in ("low", "high"):
        object.__setattr__(record, name, None)
    for name in spans:
        figures = getattr(record, name)
        object.__setattr__(record, name, {f: [v[0], None, None] for f, v in figures.items()})


def key(plan: Plan, backend_version: str, cache_file: Path, say: Say | None = None) -> str:
    parts = [plan.hardware.fingerprint(), plan.backend, backend_version,
             digest.model_id(plan.target, cache_file, say),
             digest.model_id(plan.draft, cache_file, say)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:20]


class Chained(Record):
    """A method chained after the result's own (plan.Step), with its k."""

    method: Method
    k: int = Field(ge=1, le=64)


class Measured(Record):
    label: str = Field(max_length=200)
    method: Method
    chain: list[Chained] = Field(default_factory=list, max_length=4)
    k: int = Field(ge=0, le=MAX_COPY_K)  # 0: the baseline
    p_min: PMin | None
    speedup: Ratio
    tps: Ratio
    acceptance: Rate | None = None
    seconds: Ratio = 0.0
    categories: dict[str, Ratio] = Field(default_factory=dict, max_length=64)  # speedup each
    low: Ratio | None = None  # the speedup's 95% interval (None: fewer than MIN_REQUESTS)
    high: Ratio | None = None
    requests: Requests | None = None  # paired requests of the kind with the fewest (None:
    # saved before they were counted)
    bound: Ratio | None = None  # the physical bound (k+1)/(k*c+1) for the c of the same run
    flag: str = Field("", max_length=500)  # why a figure is not to be trusted (said, not hidden)
    # beside the objective's (speedup): the end-to-end speedup, the time-to-first-token ratio
    # (the baseline's over its), the decode speedup
    latency: Ratio | None = None
    ttft: Ratio | None = None
    decode: Ratio | None = None

    @model_validator(mode="after")
    def _backed(self) -> Measured:
        _unbacked(self)
        return self

    @model_validator(mode="after")
    def _within_bound(self) -> Measured:
        """A figure above the physical bound is never carried unflagged."""
        if self.bound is not None and not self.flag and any(
                v > self.bound * 1.0001 for v in (self.speedup, self.high or 0.0,
                                                  self.decode or 0.0,
                                                  *self.categories.values())):
            raise ValueError(f"{self.label}: a figure above the physical bound "
                             f"{self.bound:.2f}x is not flagged")
        return self


def bound_flag(bound: float | None, figures: dict[str, float], flag: str = "") -> str:
    """`flag`, with what of `figures` is above the physical bound said first."""
    if bound is None:
        return flag
    above = {name: v for name, v in figures.items() if v > bound * 1.0001}
    if not above:
        return flag
    what = ", ".join(f"{n} {v:.2f}x" for n, v in above.items())
    return (f"above the physical bound {bound:.2f}x ({what}): noise, not a speedup"
            + (f"; {flag}" if flag else ""))[:500]


class Winner(Record):
    """A category's best measured configuration in the race ("none": the baseline)."""

    category: str = Field(max_length=64)
    label: str = Field(max_length=200)
    method: Method
    k: int = Field(ge=0, le=MAX_COPY_K)
    p_min: PMin | None
    chain: list[Chained] = Field(default_factory=list, max_length=4)
    speedup: Ratio
    low: Ratio | None = None  # its 95% interval on the category (None: fewer than MIN_REQUESTS)
    high: Ratio | None = None
    requests: Requests | None = None  # its paired requests there (None: saved before)
    baseline_tps: Ratio | None = None  # the baseline's decode tokens/s on the category

    @model_validator(mode="after")
    def _backed(self) -> Winner:
        _unbacked(self)
        return self

    def text(self) -> str:
        """'draft k=3 1.31x [1.22-1.40]', 'draft k=3 1.31x (one request: no interval)'."""
        if self.method == "none":
            return self.label
        return f"{self.label} {shown(self.speedup, self.low, self.high, self.requests)}"


NEAR = 0.02  # a point this close under 1.00x is a tie (see `slowed`)


def slowed(point: float, high: float | None, requests: int, margin: float) -> bool:
    """Whether a speedup on a category says the configuration surely slows it: its 95%
    interval wholly below 1.00x (its top under 1) on MIN_REQUESTS requests or more, its point
    NEAR or more under 1 (a configuration measured on fewer requests than the baseline reads a
    little slow where it runs as fast: a low quantile of fewer timings is slower; ngram-mod,
    drafting nothing on a summary and as fast as the baseline, measured 0.99x [0.99-1.00]); on
    fewer, which have no interval, its point under 1 by the margin every comparison uses (a
    near tie is noise)."""
    if requests >= MIN_REQUESTS and high is not None:
        return high < 1.0 and point < 1 - NEAR
    return point * (1 + margin) < 1.0


class OnCategory(Record):
    """A speedup on one category: its point, its 95% interval (None from fewer than
    MIN_REQUESTS requests) and the requests it rests on."""

    point: Ratio
    low: Ratio | None = None
    high: Ratio | None = None
    requests: int = Field(ge=1, le=1 << 30)

    @model_validator(mode="after")
    def _backed(self) -> OnCategory:
        _unbacked(self)
        return self

    def slowed(self, margin: float) -> bool:
        return slowed(self.point, self.high, self.requests, margin)

    def text(self) -> str:
        """'0.78x [0.74-0.83]', '0.78x (one request: no interval)'."""
        return shown(self.point, self.low, self.high, self.requests)


class Refused(Record):
    """A configuration not picked because it surely slows a category (`slowed`), by the
    objective."""

    label: str = Field(max_length=200)
    category: str = Field(max_length=64)
    speedup: OnCategory  # on the category


PerToken = Annotated[float, Field(gt=0, le=1e3)]  # seconds a token: finite, above 0


class Timing(Record):
    """What a measured setting (the baseline too) cost a request in the race
    (measure/route/costs.py): its prefill seconds per prompt token (None: no prompt long enough),
    and its decode seconds per answer token on each category it answered."""

    label: str = Field(max_length=200)
    method: Method
    k: int = Field(ge=0, le=MAX_COPY_K)
    p_min: PMin | None
    chain: list[Chained] = Field(default_factory=list, max_length=4)
    prefill: PerToken | None = None
    decode: dict[str, PerToken] = Field(default_factory=dict, max_length=64)


class Shape(Record):
    """A category's requests as the race saw them: the router's kind it counts as, its answers'
    median length (tokens a turn) and whether they ran to the length asked (the median is then
    a floor), the characters of prompt text a prompt token carried (None: no prompt long
    enough)."""

    kind: str | None = Field(None, pattern=r"^[a-z]{1,32}$")
    answer: int = Field(ge=1, le=1 << 20)
    ran_out: bool = False
    chars_per_token: Annotated[float, Field(ge=0.5, le=64)] | None = None


class Result(Record):
    profile: str = Field(max_length=64)
    method: Method  # "none" = speculation off
    k: int = Field(ge=0, le=MAX_COPY_K)  # as in a profile (n-gram methods longer); 0: off
    chain: list[Chained] = Field(default_factory=list, max_length=4)  # methods after `method`
    p_min: PMin | None
    speedup: Ratio
    summary: str = Field(max_length=2000)
    alpha: Rate | None
    cost: Ratio | None
    verify: dict[str, Ratio]
    baseline_tps: Ratio
    predicted: list[dict[str, float]] = Field(default_factory=list, max_length=64)
    measured: list[Measured] = Field(default_factory=list, max_length=256)
    skipped: list[str] = Field(default_factory=list, max_length=64)  # not measured, and why
    seconds: Ratio = 0.0
    created: str = Field("", max_length=64)
    key: str = ""
    categories: dict[str, Ratio] = Field(default_factory=dict, max_length=64)  # the choice's
    workload: str = Field("", max_length=2000)  # the categories and their shares tuned for
    concurrency: int = Field(1, ge=1, le=256)  # concurrent requests tuned for
    # k by batch size ((first, last, k), inclusive from 1), for backends that switch k per batch
    k_by_batch: list[tuple[Annotated[int, Field(ge=1, le=4096)], Annotated[int, Field(
        ge=1, le=4096)], Annotated[int, Field(ge=0, le=MAX_COPY_K)]]] = Field(
        default_factory=list, max_length=64)
    schedule_notes: list[str] = Field(default_factory=list, max_length=64)
    quality: str = Field("", max_length=2000)  # tune's sampling check before it saved
    low: Ratio | None = None  # the headline's 95% interval (None: fewer than MIN_REQUESTS)
    high: Ratio | None = None
    requests: Requests | None = None  # the pick's paired requests on the kind with the fewest
    # (None: saved before they were counted)
    unmeasured: list[str] = Field(default_factory=list, max_length=64)  # the workload's
    # categories tune could not measure the pick on: no winner, served as before (no draft)
    settled: bool = True  # the interval reached the precision asked (or decided): else
    # provisional (the budget ran out first); saved either way
    winners: list[Winner] = Field(default_factory=list, max_length=64)  # each category's best
    stopped: str = Field("", max_length=40)  # "precision", "decided" or "budget"
    noise: str = Field("", max_length=1000)  # what else ran, the baseline's drift
    sequential: bool = False  # one server at a time (two did not fit, or --sequential)
    # what speedup, low, high, categories and winners are of (a result saved before the
    # objective existed was decided on decode speed)
    objective: Objective = "decode"
    # what each measured setting cost a request, and each category's shape (a result saved
    # before them routes by kind alone)
    timings: list[Timing] = Field(default_factory=list, max_length=64)
    shapes: dict[str, Shape] = Field(default_factory=dict, max_length=64)
    figures: dict[Figure, Span] = Field(default_factory=dict)  # the pick's, each figure
    # the choice's greedy replies in the race beside the baseline's on the same prompts (reply,
    # baseline reply, baseline tokens): the sampling check reads them (lossless.gate); not saved
    replies: list[tuple[str, str, int]] = Field(default_factory=list, exclude=True,
                                                max_length=256)
    # the choice's speedup on each category with its 95% interval (saved before this existed:
    # none), and the configurations refused because each surely slows a category
    spans: dict[str, OnCategory] = Field(default_factory=dict, max_length=64)
    refused: list[Refused] = Field(default_factory=list, max_length=256)

    @model_validator(mode="after")
    def _backed(self) -> Result:
        _unbacked(self, ("figures",))
        return self

    @model_validator(mode="after")
    def _k_for_method(self) -> Result:
        if self.method == "none" and self.k != 0:
            raise ValueError(f"k is {self.k} with speculation off")
        if self.method != "none" and self.k < 1:
            raise ValueError(f"k must be 1..{MAX_COPY_K} for {self.method}")
        if self.chain and (self.method == "none" or any(
                c.method not in NGRAMS or c.method == self.method for c in self.chain)):
            raise ValueError("a chain adds n-gram methods to another method")
        return self

    @property
    def state(self) -> str:
        return "settled" if self.settled else "provisional"

    @property
    def steps(self) -> tuple[Step, ...]:
        """The chain as the plan's steps (what planning reads: planner.TunedResult)."""
        return steps_of(self.chain)

    @property
    def serves(self) -> bool:
        """Whether `up` serves it: speculation on, its interval's bottom above 1.00x and its
        point over the baseline by the margin every comparison uses (a near-tie is noise), by
        the objective it was decided on, and no category it surely slows (`slows`). A pick with
        no interval (fewer than MIN_REQUESTS requests of a kind) is not surely faster; one
        saved before intervals or requests were counted is judged as it was saved."""
        from specctl.orchestrator.measure.lab.engine import MARGIN  # (it pulls the HTTP client in)

        sure = self.low > 1.0 if self.low is not None else backed(self.requests)
        return self.method != "none" and self.speedup > 1 + MARGIN and sure and not self.slows

    @property
    def slows(self) -> dict[str, OnCategory]:
        """The categories the choice surely slows (`slowed`)."""
        from specctl.orchestrator.measure.lab.engine import MARGIN

        return {c: s for c, s in self.spans.items() if s.slowed(MARGIN)}

    def to_json(self) -> dict[str, Any]:
        return self.model_dump()

    @classmethod
    def from_json(cls, data: Any) -> Result:
        """Strictly: a file holds JSON types, so "4" or true for k is a bad file."""
        return cls.model_validate(data, strict=True)


def path_for(folder: Path, key_: str) -> Path:
    return inside(folder, key_, ".json", "tuning key")


def save(folder: Path, result: Result) -> Path:
    path = path_for(folder, result.key)
    checked = Result.model_validate(result.model_dump())  # the limits hold for what is written
    write_atomic(path, json.dumps(checked.to_json(), indent=2) + "\n")
    return path


def _parse(key_: str, text: str) -> Result:
    result = Result.model_validate_json(text, strict=True)  # as from_json, from the text
    if result.key and result.key != key_:
        raise ValueError(f"it is the result for key {result.key[:20]}")
    return result


def load(folder: Path, key_: str) -> Result | None:
    """The saved result, None when there is none. One that is not valid is moved aside and
    reported (StateError, one line)."""
    return read_back(path_for(folder, key_), lambda text: _parse(key_, text), "tuning result",
                     "Run `specctl tune` again")


def chain_of(steps: tuple[Step, ...]) -> list[Chained]:
    return [Chained(method=s.method, k=s.k) for s in steps]


def steps_of(chain: list[Chained]) -> tuple[Step, ...]:
    return tuple(Step(c.method, c.k) for c in chain)
