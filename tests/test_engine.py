"""The measuring mechanics bench and tune share, on stand-in servers: log names, the warm-up
that is not counted, and each request's draft counters (one reading per request, per server)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest

from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.launch import Endpoint, Launch
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.measure.bench import flow as bench
from specctl.orchestrator.measure.lab import engine
from specctl.orchestrator.runtime import client, servers
from tests import plans


class Counting(Adapter):
    """Servers whose draft counters grow by (10, 7, 2) per request; counts the readings."""

    name = "counting"

    def __init__(self) -> None:
        self.seen: dict[Endpoint, SpecStats] = {}
        self.reads = 0

    def chat(self, endpoint: Endpoint, prompt: str | list[dict[str, str]], max_tokens: int,
             **_how: object) -> client.Reply:
        before = self.seen.get(endpoint, SpecStats())
        self.seen[endpoint] = before + SpecStats(10, 7, 2, (4, 3))
        said = client.messages_of(prompt)[-1]["content"]
        return client.Reply(f"{said} from {endpoint!r}", max_tokens, 10.0, 1.0, "server", {})

    def spec_stats(self, endpoint: Endpoint) -> SpecStats:
        self.reads += 1
        return self.seen.get(endpoint, SpecStats())


@pytest.fixture
def plan() -> Plan:
    return plans.plan()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Counting:
    counting = Counting()
    monkeypatch.setattr(client, "chat", counting.chat)
    return counting


def test_labels_name_distinct_log_files(plan: Plan) -> None:
    tune = ["baseline", "draft alone", *(f"{m} k={k}{p}" for m in ("draft", "ngram")
                                         for k in range(1, 17) for p in ("", " p-min 0.5"))]
    labels = [f"bench-{c.label}" for c in bench.configs_for(plan, range(1, 17))]
    labels += [f"tune-{label}" for label in tune]
    names = [engine.log_name(label) for label in labels]
    assert len(set(names)) == len(labels)
    assert not any(c in name for name in names for c in " =/")
    assert engine.log_name("bench-draft k=4") == "bench-draftk4"  # the log names stay as they were


def test_each_request_gets_its_own_counters_interleaved(plan: Plan, fake: Counting) -> None:
    backend = fake
    a = engine.Served(plan, backend, Endpoint("http://a/v1"))
    b = engine.Served(plan, backend, Endpoint("http://b/v1"))
    reads = fake.reads
    got = [srv.ask("hi", 16) for srv in (a, b, b, a)]
    assert [g.spec for g in got] == [SpecStats(10, 7, 2, (4, 3))] * 4
    assert fake.reads - reads == 4  # one reading per request: after one is before the next
    assert got[0].sha == engine.text_sha(f"hi from {a.endpoint!r}") != got[1].sha


def test_no_counters_read_without_speculation(plan: Plan, fake: Counting) -> None:
    srv = engine.Served(plan.baseline(), fake, Endpoint("http://a/v1"))
    assert srv.ask("hi", 16).spec == SpecStats()
    assert fake.reads == 0


def test_serve_warms_up_without_counting_it(plan: Plan, fake: Counting, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []

    @contextmanager
    def ephemeral(plan: Plan, backend: Adapter, installed: Any, logs: Path,
                  label: str) -> Iterator[Any]:
        started.append(label)
        yield servers.Running(plan, Launch(argv=("server",), model="m"), Endpoint("http://a/v1"),
                              logs / "log")

    monkeypatch.setattr(servers, "ephemeral", ephemeral)
    with engine.serve(plan, fake, cast(Any, None), tmp_path, "tune-draft k=3") as s:
        assert fake.seen[Endpoint("http://a/v1")].drafted == 10  # the warm-up reached the server
        assert s.ask("hi", 16).spec.drafted == 10  # and is not in the first request's counters
    assert started == ["tune-draftk3"]
