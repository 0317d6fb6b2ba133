"""The measured fastest backend (`bench --backends`): saved, read back with validation, and
preferred by the plan among the profile's backends, with the reason; no servers here."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from specctl.orchestrator.contract import registry
from specctl.orchestrator.errors import StateError
from specctl.orchestrator.measure.bench import flow as bench
from specctl.orchestrator.measure.bench import versus
from specctl.orchestrator.measure.results import winners
from specctl.orchestrator.planning import backends
from tests.conftest import recorded

CPU = recorded("linux_cpu_2c_24g")


def winner(fast: str = "ollama", slow: str = "llamacpp") -> winners.FastestBackend:
    return winners.FastestBackend(profile="p", machine="vm", measured="2026-12-03 08:00", speeds=(
        winners.Speed(backend=slow, setting="draft k=3", tps=10.0, speedup=1.2),
        winners.Speed(backend=fast, setting="no draft", tps=13.0, speedup=1.0)))


def installed() -> dict[str, object]:
    adapters = {n: cls() for n, cls in registry.adapter_classes().items()}
    return {"adapters": adapters,
            "probed": {n: replace(a.assumed(), assumed=False) for n, a in adapters.items()}}


def test_saved_and_read_back(tmp_path: Path) -> None:
    saved = winners.save(tmp_path, winner(), CPU.fingerprint())
    assert winners.load(tmp_path, "p", CPU.fingerprint()) == winner()
    assert winners.load(tmp_path, "other", CPU.fingerprint()) is None
    assert "1.30x faster than llamacpp" in winner().why()
    saved.write_text(json.dumps({**json.loads(saved.read_text()), "speeds": []}))
    with pytest.raises(StateError, match="backend choice"):
        winners.load(tmp_path, "p", CPU.fingerprint())
    assert saved.with_name(saved.name + ".corrupt").exists()


def test_the_plan_prefers_the_measured_fastest_and_says_why() -> None:
    got = installed()
    adapters, probed = got["adapters"], got["probed"]
    measured = (winner().best.backend, winner().why())
    choice = backends.choose([], CPU, adapters, probed, measured)  # type: ignore[arg-type]
    assert choice.name == "ollama" and "measured" in choice.reasons[0]
    both = backends.choose(["llamacpp", "ollama"], CPU, adapters, probed,  # type: ignore[arg-type]
                           measured)
    assert both.name == "ollama"
    pinned = backends.choose(["llamacpp"], CPU, adapters, probed, measured)  # type: ignore[arg-type]
    assert pinned.name == "llamacpp"  # a profile that names one backend keeps it
    default = backends.choose(["llamacpp", "ollama"], CPU, adapters, probed)  # type: ignore[arg-type]
    assert default.name == "llamacpp" and "This is a default" in default.reasons[0]


def test_a_backends_speed_is_its_best_configuration() -> None:
    def sample(config: str, tps: float) -> bench.Sample:
        return bench.Sample(config=config, method="draft", k=3, category="code", prompt=0,
                            repeat=0, tokens=60, decode_tps=tps, wall_s=1.0, timed_by="server",
                            drafted=0, accepted=0, drafts=0, text_sha="x")

    report: dict[str, dict[str, object]] = {"configs": {"draft k=3": {}}}
    faster = versus.speed_of(report, [sample("baseline", 10.0), sample("draft k=3", 15.0)],
                             {"code": 1.0}, "llamacpp")
    assert (faster.setting, faster.tps, faster.speedup) == ("draft k=3", 15.0, 1.5)
    slower = versus.speed_of(report, [sample("baseline", 10.0), sample("draft k=3", 8.0)],
                             {"code": 1.0}, "llamacpp")
    assert (slower.setting, slower.tps) == ("no draft", 10.0)
