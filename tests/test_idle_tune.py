"""The gateway's idle tuner (gateway/idle.py) chooses what to tune on: the model's kept traffic
once it holds enough (replay.enough: 40 requests), else the shipped suites, and says which. A
pool without engines (tests/test_pool_states.py's runner: the one faked part), a clock the test
moves, a real kept-traffic store; the tune the tuner starts is a real `specctl tune` process,
for a profile that does not exist here, so it ends at once (exit 2): its argv is what counts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from specctl.adapters.llamacpp import LlamaCpp
from specctl.orchestrator.app import App, Resolved, Routable
from specctl.orchestrator.config import profiles
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.gateway.idle import IdleTuner
from specctl.orchestrator.gateway.metrics import Metrics
from specctl.orchestrator.gateway.plans import Plans
from specctl.orchestrator.gateway.pool import Pool, PoolSettings
from specctl.orchestrator.measure.traffic import replay
from specctl.orchestrator.measure.traffic import store as traffic
from specctl.orchestrator.runtime.server import Server
from tests import plans as plan_values
from tests.test_pool_states import Clock, FakeRunner

MODEL = "no-such-profile-idle"  # `specctl tune --profile` of it ends at once
AFTER = 120.0


def _untuned(keep: int) -> Resolved:
    """A k = "auto" profile served on the cost model's setting (what the idle tuner tunes)."""
    profile = profiles.parse(f'target = "/models/t.gguf"\n[gateway]\nkeep_traffic = {keep}\n'
                             "route = false\n",
                             name=MODEL, source="test")
    plan = plan_values.plan(profile=MODEL, k_source="cost model")
    backend = LlamaCpp()
    return Resolved(profile, plan, backend.assumed(), backend)


def _keep(dirs: Dirs, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        body = {"messages": [{"role": "user", "content": f"request {i}"}]}
        kind = ("chat", "code", "summarize", "docqa")[i % 4]
        assert traffic.record(dirs, MODEL, body, kind, 100, 50, keep=1000).kept


def _started(tuner: IdleTuner, said: list[str]) -> list[str]:
    """The argv of the tune the tuner started (under its leash), once it has ended."""
    proc = tuner.proc
    assert proc is not None
    args = [str(a) for a in proc.proc.args]  # type: ignore[union-attr]
    deadline = time.monotonic() + 60
    while proc.exit_code is None:
        assert time.monotonic() < deadline, "the tune did not end"
        time.sleep(0.05)
    tuner.tick()  # reaped: it ended (2: no such profile), tried again at the next idle spell
    assert _proc(tuner) is None and f"background tune of {MODEL} ended (2)" in said[-1]
    return args[args.index("--") + 1:]


def _proc(tuner: IdleTuner) -> Server | None:
    return tuner.proc


def test_the_idle_tune_uses_the_kept_traffic_once_it_holds_enough(isolated_dirs: Dirs,
                                                                   tmp_path: Path) -> None:
    async def run() -> None:
        found = _untuned(keep=500)
        said: list[str] = []
        clock = Clock()
        plans = Plans(App.from_env(), {MODEL: found.profile}, {MODEL: Routable(found)}, None)
        pool = Pool(plans, PoolSettings(start_wait=5.0), Metrics(), said.append, FakeRunner(),
                    clock=clock)
        pool.release(await pool.acquire(MODEL))
        tuner = IdleTuner(pool, {MODEL: MODEL}, AFTER, tmp_path, clock=clock)
        assert tuner.wanted() == [MODEL]

        _keep(isolated_dirs, replay.ENOUGH - 1)
        clock.now += AFTER - 1
        tuner.tick()
        assert tuner.proc is None  # not idle long enough yet
        clock.now += 2
        tuner.tick()
        argv = _started(tuner, said)
        assert argv[-3:] == ["tune", "--profile", MODEL] and "--prompts" not in argv
        line = next(s for s in said if s.startswith("idle: tuning"))
        assert line.startswith(f"idle: tuning {MODEL} in the background on the shipped suites "
                               "(its kept traffic has 39 requests; 40 with two of a kind are "
                               "needed) (try 1 of 3")

        _keep(isolated_dirs, 1, start=replay.ENOUGH - 1)  # the fortieth
        tuner.tick()
        argv = _started(tuner, said)
        assert argv[-5:] == ["tune", "--profile", MODEL, "--prompts", "traffic"]
        line = [s for s in said if s.startswith("idle: tuning")][-1]
        assert line.startswith(f"idle: tuning {MODEL} in the background on its kept traffic "
                               "(40 requests) (try 2 of 3")
        await pool.close()

    asyncio.run(run())


def test_without_keep_traffic_the_suites_and_nothing_is_read(isolated_dirs: Dirs,
                                                             tmp_path: Path) -> None:
    """keep_traffic 0: a file left from before (the profile kept traffic once) is not used."""
    _keep(isolated_dirs, replay.ENOUGH)
    found = _untuned(keep=0)
    plans = Plans(App.from_env(), {MODEL: found.profile}, {MODEL: Routable(found)}, None)
    pool = Pool(plans, PoolSettings(), Metrics(), print, FakeRunner())
    tuner = IdleTuner(pool, {MODEL: MODEL}, AFTER, tmp_path)
    argv, on = tuner.argv(MODEL)
    assert "--prompts" not in argv and on == "on the shipped suites"
