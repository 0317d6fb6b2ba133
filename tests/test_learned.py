"""The served choice follows the evidence (measure/route/learned.py), on made-up served requests
of known speeds: tune's figure for a kind serves until MIN served requests of the setting and of
no draft give an interval; a setting serves only where it is surely faster than no draft; a kind
moves back to no draft once its live figures say the draft loses; exploring stays within its
share, alone only; under load with nothing measured there, no draft serves; no interval from
fewer than MIN requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specctl.orchestrator.measure.route import remembered
from specctl.orchestrator.measure.route.classify import Facts
from specctl.orchestrator.measure.route.learned import (
    EXPLORE,
    FIRST,
    MIN,
    OFF,
    Learned,
    Prior,
    Served,
    bucket,
    estimate,
)

CODE = Facts("code", 400, 128)
DRAFT = "draft k=4"


def served(setting: str, kind: str = "code", load: int = 1, d: float = 0.1,
           f: float = 0.01) -> Served:
    """A served request of 100 prompt tokens and 129 answer tokens: `f` s a prompt token,
    `d` s an answer token after the first."""
    return Served(setting, kind, load, 100, 100 * f, 129, 128 * d)


def test_buckets_and_no_interval_from_fewer_than_min() -> None:
    assert [bucket(n) for n in (1, 2, 3, 4, 5, 40)] == ["1", "2", "3-4", "3-4", "5+", "5+"]
    assert estimate([1.0] * (MIN - 1)) is None
    got = estimate([1.0, 1.1, 0.9])
    assert got is not None and got.low < 1.0 < got.high and got.n == 3


def test_tune_s_figure_serves_until_the_served_requests_give_their_own() -> None:
    learned = Learned((DRAFT, OFF), {"code": Prior(DRAFT, 1.4, None)}, DRAFT)
    first = learned.choose(CODE, 1)
    assert first.setting == DRAFT and "one request: no interval" in first.why
    assert learned.choose(CODE, 2).setting == OFF  # under load, nothing measured there
    assert learned.choose(Facts("math", 300, 128), 1).setting == OFF  # never another kind's


def test_a_draft_serves_where_it_is_surely_faster_and_leaves_where_it_loses() -> None:
    learned = Learned((DRAFT, OFF), {"code": Prior(DRAFT, 1.4, 1.2)}, DRAFT)
    for d_draft in (0.060, 0.062, 0.061):
        learned.add(served(DRAFT, d=d_draft))
    for d_off in (0.100, 0.101, 0.099):
        learned.add(served(OFF, d=d_off))
    said: list[str] = []
    got = learned.choose(CODE, 1, said.append)
    assert got.setting == DRAFT and "over 3" in got.why
    for d_draft in (0.13, 0.14, 0.13, 0.14, 0.13, 0.14):  # the traffic moved: it loses now
        learned.add(served(DRAFT, d=d_draft))
    got = learned.choose(CODE, 1, said.append)
    assert got.setting == OFF and "nothing is surely faster" in got.why
    assert said and said[-1].startswith(f"code at load 1: {OFF} now (was {DRAFT})")


def test_a_near_tie_is_no_draft() -> None:
    learned = Learned((DRAFT, OFF), {}, DRAFT)
    for n in range(MIN):
        learned.add(served(DRAFT, d=0.098 + 0.001 * n))
        learned.add(served(OFF, d=0.100 + 0.001 * n))
    assert learned.choose(CODE, 1).setting == OFF


def test_exploring_stays_within_its_share_and_stops_once_measured() -> None:
    learned = Learned((DRAFT, OFF), {}, DRAFT)  # no tune: the plan's draft serves, off explored
    picks = []
    for _ in range(200):
        got = learned.choose(CODE, 1)
        picks.append(got.setting)
        learned.add(served(got.setting, d=0.06 if got.setting == DRAFT else 0.1))
    explored = learned.explored[("code", "1")]
    assert 0 < explored <= EXPLORE * 200 and explored <= MIN
    assert picks[:FIRST] == [DRAFT] * FIRST and picks[FIRST] == OFF  # one early exploring
    # then one in 1 / EXPLORE: the second after that many more (it came at once before: eight
    # whole-file edits through the gateway had two of their eight at no draft's speed)
    second = picks.index(OFF, FIRST + 1)
    assert second == FIRST + round(1 / EXPLORE), picks[:20]
    assert picks[-1] == DRAFT  # measured, and surely faster
    for _ in range(50):  # under load nothing is explored
        assert learned.choose(CODE, 3).setting == OFF
    assert learned.explored[("code", "3-4")] == 0


def test_what_a_retune_keeps() -> None:
    before = Learned((DRAFT, OFF), {}, DRAFT)
    for _ in range(MIN):
        before.add(served(DRAFT, d=0.06))
        before.add(served(OFF, d=0.1))
    after = Learned(("ngram k=8", DRAFT, OFF), {}, "ngram k=8")
    after.keep_from(before)
    assert after.choose(CODE, 1).setting == DRAFT  # the figures outlive the route


@pytest.mark.parametrize("load", [2, 4, 6])
def test_under_load_measured_figures_decide_too(load: int) -> None:
    learned = Learned((DRAFT, OFF), {}, DRAFT)
    for _ in range(MIN):
        learned.add(served(DRAFT, load=load, d=0.2))  # four users: verification batches
        learned.add(served(OFF, load=load, d=0.1))
    assert learned.choose(CODE, load).setting == OFF
    rows = {(r["kind"], r["load"]): r for r in learned.rows()}
    row = rows[("code", bucket(load))]
    assert row["measured"] == {DRAFT: MIN, OFF: MIN} and row["setting"] == OFF


def test_the_figures_outlive_a_restart_and_a_bad_file_starts_anew(tmp_path: Path) -> None:
    learned = Learned((DRAFT, OFF), {}, DRAFT)
    for _ in range(MIN):
        learned.add(served(DRAFT, d=0.06), chars=1400)
        learned.add(served(OFF, d=0.1), chars=1400)
    learned.choose(CODE, 1)
    path = remembered.path_for(tmp_path, "m", "abc123")
    remembered.save(path, "m", learned)
    assert "code" in path.read_text() and "Write" not in path.read_text()  # numbers alone
    again = Learned((DRAFT, OFF), {}, DRAFT)
    assert remembered.load(path, again) == ""
    assert again.choose(CODE, 1).setting == DRAFT and again.seen[("code", "1")] == 2
    data = json.loads(path.read_text())
    data["decode"][0]["values"] = [1e9]  # not a time a token takes
    path.write_text(json.dumps(data))
    fresh = Learned((DRAFT, OFF), {}, DRAFT)
    said = remembered.load(path, fresh)
    assert said.startswith("the served figures") and "They start anew" in said
    assert not path.exists() and fresh.decode == {}
