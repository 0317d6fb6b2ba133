"""Issue 59: tune explores breadth first and claims no interval or precision from fewer than
three paired requests of a kind, in what it prints, in its JSON and in the saved result.
Simulated engine (tests/simengine.py): a known speed law, noise bursts; short budgets, so that
most tunes end with some figure on one or two requests."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from rich.console import Console

from specctl.orchestrator.cli import render
from specctl.orchestrator.measure.estimates.estimate import MIN_REQUESTS, shown
from specctl.orchestrator.measure.lab.servers import Timed
from specctl.orchestrator.measure.results.tuned import Result
from specctl.orchestrator.measure.tune.flow import tune
from tests import plans
from tests.simengine import SimLab, laws

SPAN = re.compile(r"\d\.\d\dx \[\d")  # '1.18x [1.18-1.18]'
ASKED = re.compile(r"precision ±\d+% asked")


def _printed(result: Result) -> str:
    console = Console(record=True, width=400)
    render.show_tuned(console, result)
    return console.export_text()


def _check(result: Result) -> int:
    """Asserts the rule on one result (fresh and read back); its thin figures' count."""
    saved = Result.model_validate_json(json.dumps(result.to_json()), strict=True)
    thin = 0
    for r in (result, saved):
        if r.method != "none":
            assert r.requests is not None
            assert (r.low is None) == (r.requests < MIN_REQUESTS), (r.requests, r.low)
            if r.requests < MIN_REQUESTS:
                thin += 1
                assert all(f[1] is None and f[2] is None for f in r.figures.values())
                claimed = ASKED.sub("", r.summary)  # the precision asked is no claim
                assert "±" not in claimed and not SPAN.search(claimed), r.summary
                assert "no interval" in r.summary, r.summary
        for m in r.measured:
            assert m.requests is not None
            if m.requests < MIN_REQUESTS:
                assert m.low is None and m.high is None, m
        for w in r.winners:
            if w.requests is not None and w.requests < MIN_REQUESTS:
                assert w.low is None and not SPAN.search(w.text()), w
        for c, s in r.spans.items():
            assert (s.low is None) == (s.requests < MIN_REQUESTS), (c, s)
        if any(x.speedup.low is None for x in r.refused):  # "surely" rests on an interval
            assert "surely slows" not in r.summary, r.summary
            assert "was measured slower on a category" in r.summary, r.summary
    text = _printed(result)
    if result.requests is not None and result.requests < MIN_REQUESTS:
        assert not SPAN.search(text.split("result (")[1]), text  # the headline and the pick
    return thin


def test_no_interval_from_fewer_than_three_requests_printed_or_saved() -> None:
    plan = plans.plan().but(k=3)
    thin = 0
    for n, law in enumerate(laws(6, plan)):
        for budget in (90.0, 240.0):
            result = tune(plan, SimLab(law, plan, seed=n, noise=0.3), max_k=8, budget=budget,
                          objective="decode")
            thin += _check(result)
            if result.requests is not None and result.requests < MIN_REQUESTS:
                assert not result.serves and not result.settled, result.summary
    assert thin, "no tune ended on fewer than three requests: the test checks nothing"


def test_a_figure_says_how_many_requests_it_rests_on() -> None:
    assert shown(1.18, 1.18, 1.18, 1) == "1.18x (one request: no interval)"
    assert shown(1.18, 1.1, 1.3, 2) == "1.18x (two requests: no interval)"
    assert shown(1.18, 1.1, 1.3, 3) == "1.18x [1.10-1.30]"


def _spied(lab: SimLab, asked: list[tuple[str, int]]) -> Callable[[str, int, int], Timed]:
    """lab.ask, each request's configuration and prompt kept in `asked`."""
    ask = lab.ask

    def spy(label: str, prompt: int, max_tokens: int) -> Timed:
        asked.append((label, prompt))
        return ask(label, prompt, max_tokens)

    return spy


def test_breadth_first_the_incumbent_on_every_kind_before_any_other_candidate() -> None:
    """Before any other candidate is asked anything, the baseline and the incumbent have a
    request of every kind of the workload."""
    plan = plans.plan().but(k=3)
    for n, law in enumerate(laws(3, plan)):
        lab = SimLab(law, plan, seed=n, noise=0.3)
        asked: list[tuple[str, int]] = []
        lab.ask = _spied(lab, asked)  # type: ignore[method-assign,assignment]
        tune(plan, lab, max_k=8, objective="decode")
        kinds = set(lab.workload.categories)
        cats = {i: p.category for i, p in enumerate(lab.workload.prompts)}
        lead = "draft k=3"
        first = next(i for i, (label, _) in enumerate(asked)
                     if label not in (lead, "baseline", "draft alone"))
        before = {cats[p] for label, p in asked[:first] if label == lead}
        assert before == kinds, (before, asked[:first])
