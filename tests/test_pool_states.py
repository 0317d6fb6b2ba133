"""The gateway's pool as states (gateway/engines.py: starting, ready, draining, failed, retired),
without servers: the pool is given a runner that starts and stops nothing (a fake process that
is alive until told otherwise) and a clock the test moves. The runner is the one part faked:
starting a real engine is tests/test_gateway.py's."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path

import pytest

from specctl.adapters.llamacpp import LlamaCpp
from specctl.orchestrator.app import App, Resolved, Routable
from specctl.orchestrator.config import profiles
from specctl.orchestrator.contract.launch import Endpoint, Launch
from specctl.orchestrator.errors import ServerError
from specctl.orchestrator.gateway.engines import MOVES, Engine, Slot, State
from specctl.orchestrator.gateway.metrics import Metrics
from specctl.orchestrator.gateway.plans import Plans, Routing, Served
from specctl.orchestrator.gateway.pool import Pool, PoolSettings, StartFailed
from specctl.orchestrator.gateway.room import NoRoom
from specctl.orchestrator.measure.route.classify import Facts
from specctl.orchestrator.runtime.servers import Running
from tests import plans as plan_values


@dataclass
class FakeProcess:
    running: Running
    alive: bool = True

    @property
    def exit_code(self) -> int | None:
        return None if self.alive else -9


@dataclass
class FakeRunner:
    """Starts in no time (or when `gate` opens), fails the starts it is told to."""

    fail_next: int = 0
    gate: threading.Event | None = None
    started: list[Engine] = field(default_factory=list)
    stopped: list[Engine] = field(default_factory=list)

    def start(self, engine: Engine, abort: Callable[[], bool]) -> FakeProcess:
        if self.gate is not None:
            while not self.gate.wait(0.01):
                if abort():
                    raise ServerError("start called off")
        if self.fail_next:
            self.fail_next -= 1
            raise ServerError("exited with code 1 while starting")
        self.started.append(engine)
        launch = Launch(argv=("engine", engine.setting))
        return FakeProcess(Running(engine.plan, launch, Endpoint("http://x/v1"), engine.log))

    def stop(self, engine: Engine, grace: float) -> None:
        if isinstance(engine.handle, FakeProcess):
            engine.handle.alive = False
        self.stopped.append(engine)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def resolved(name: str, k: int = 3, context: int = 4096) -> Resolved:
    profile = profiles.parse('target = "/models/t.gguf"\n[gateway]\nkeep_alive = 30\n'
                             "route = false\n", name=name, source="test")  # one server each
    plan = plan_values.plan(profile=name, k=k, memory=plan_values.memory(context),
                            target=plan_values.target(path=Path(f"/models/{name}.gguf")),
                            draft=plan_values.draft(path=Path(f"/models/{name}-draft.gguf")),
                            parallel=4)  # llama.cpp's own slots: requests at once, no line
    backend = LlamaCpp()
    return Resolved(profile, plan, backend.assumed(), backend)


class FakePlans(Plans):
    """Plans resolved by the test: `refresh` hands over what `next` holds."""

    def __init__(self, names: list[str]) -> None:
        found = {n: resolved(n) for n in names}
        super().__init__(App.from_env(), {n: r.profile for n, r in found.items()},
                         {n: Routable(r) for n, r in found.items()}, None)
        self.next: dict[str, Served] = {}
        self.refreshed = 0

    def refresh(self, model: str) -> Served:
        self.refreshed += 1
        self.served[model] = self.next.get(model, self.served[model])
        return self.served[model]


def pool_of(names: list[str], runner: FakeRunner, **options: float) -> tuple[Pool, Clock,
                                                                              list[str]]:
    said: list[str] = []
    clock = Clock()
    pool = Pool(FakePlans(names), PoolSettings(start_wait=options.pop("start_wait", 5.0),
                                          **options),  # type: ignore[arg-type]
                Metrics(), said.append, runner, clock=clock)
    return pool, clock, said


def state(engine: Engine) -> State:
    """(read through a call: mypy would keep an attribute narrowed across awaits)"""
    return engine.state


async def settle(pool: Pool) -> None:
    """Let the pool's background work (starts, retirements) finish."""
    for _ in range(200):
        if not pool._tasks:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the pool's work did not finish")


def test_the_moves_are_the_documented_ones(tmp_path: Path) -> None:
    for here, there in product(State, State):
        engine = Engine(Slot("m"), resolved("m"), tmp_path / "x.log", state=here)
        moved = engine.move(there)
        assert moved == (there in MOVES[here]), (here, there)
        assert engine.state is (there if moved else here)
        assert engine.settled.is_set() == moved  # a move always leaves `starting`
    assert MOVES[State.RETIRED] == frozenset()  # final
    assert Slot("m", "ngram k=8").routed and not Slot("m").routed
    assert str(Slot("m", "off")) == "m [off]"


def test_a_slot_starts_once_serves_and_retires_after_its_keep_alive() -> None:
    async def run() -> None:
        runner = FakeRunner()
        pool, clock, said = pool_of(["a"], runner)
        first, second = await asyncio.gather(pool.acquire("a", Facts("chat", 40)),
                                             pool.acquire("a"))
        assert first is second and state(first) is State.READY and len(runner.started) == 1
        assert first.inflight == 2
        pool.release(first)
        pool.release(first)
        clock.now += 31  # past its keep-alive of 30 s
        await pool.tick()
        assert state(first) is State.RETIRED and runner.stopped == [first]
        assert pool.current == {} and pool.engines == []
        assert "stopped a (draft k=3): keep-alive" in said
        again = await pool.acquire("a")
        assert again is not first and state(again) is State.READY

    asyncio.run(run())


def test_a_failed_start_is_told_and_the_next_request_starts_anew() -> None:
    async def run() -> None:
        runner = FakeRunner(fail_next=1)
        pool, _clock, said = pool_of(["a"], runner)
        with pytest.raises(StartFailed, match="a could not start: exited with code 1"):
            await pool.acquire("a")
        assert pool.current == {} and any("did not start" in s for s in said)
        engine = await pool.acquire("a")
        assert state(engine) is State.READY

    asyncio.run(run())


def test_a_dead_or_hung_engine_fails_is_stopped_now_and_is_started_again() -> None:
    async def run() -> None:
        runner = FakeRunner()
        pool, _clock, said = pool_of(["a"], runner)
        engine = await pool.acquire("a")
        pool.release(engine)
        assert isinstance(engine.handle, FakeProcess)
        engine.handle.alive = False  # it died
        await pool.tick()
        await settle(pool)
        assert state(engine) is State.RETIRED and isinstance(engine.failure, ServerError)
        assert "a (draft k=3) exited with code -9; the next request starts it again" in said
        hung = await pool.acquire("a")
        pool.fail(hung, "sent nothing within the bound between chunks of 60 s")
        assert state(hung) is State.FAILED
        pool.fail(hung, "again")  # a second report changes nothing
        await settle(pool)
        assert state(hung) is State.RETIRED and runner.stopped[-1] is hung
        text = pool.metrics.render().decode()
        assert 'reason="hung"' in text and 'reason="died"' in text
        assert (await pool.acquire("a")) not in (engine, hung)

    asyncio.run(run())


def test_no_room_is_said_with_the_figures_and_the_least_recently_used_idle_one_leaves(
        ) -> None:
    one = plan_values.plan().memory.device_bytes

    async def run() -> None:
        runner = FakeRunner()
        pool, clock, said = pool_of(["a", "b", "c"], runner, budget=2 * one + 1,
                                    start_wait=0.3)
        a = await pool.acquire("a")
        clock.now += 1
        b = await pool.acquire("b")
        pool.release(a)
        c = await pool.acquire("c")  # no room for three: a, idle and least recently used, goes
        assert state(a) is State.RETIRED and any("stopping a (draft k=3)" in s for s in said)
        with pytest.raises(NoRoom, match=r"no room within the memory budget: a \(draft k=3\) "
                           r"needs 4\.\d\d GiB beside 8\.\d\d GiB held by servers busy") as busy:
            await pool.acquire("a")  # b and c are both busy
        assert busy.value.status == 503
        pool.release(b)
        pool.release(c)

    asyncio.run(run())

    async def too_big() -> None:
        pool, _clock, _said = pool_of(["a"], FakeRunner(), budget=one - 1)
        with pytest.raises(NoRoom, match="more than the whole budget") as alone:
            await pool.acquire("a")
        assert alone.value.status == 507

    asyncio.run(too_big())


def test_a_saved_tune_replaces_a_ready_engine_beside_it_and_the_old_one_drains(
        isolated_dirs: object) -> None:
    async def run() -> None:
        runner = FakeRunner()
        pool, _clock, said = pool_of(["a"], runner)
        plans = pool.plans
        assert isinstance(plans, FakePlans)
        old = await pool.acquire("a")  # a request in flight on the old setting
        plans.next["a"] = Served(resolved("a", k=6), Routing(None, "not routed: test"))
        plans.app.dirs.tuned.mkdir(parents=True, exist_ok=True)
        (plans.app.dirs.tuned / "a.json").write_text("{}")  # `tune` saved
        await pool.tick()
        await settle(pool)
        new = pool.current[Slot("a")]
        assert new is not old and new.setting == "draft k=6" and state(new) is State.READY
        assert state(old) is State.DRAINING  # finishing its request
        assert "a: swapped to draft k=6; draft k=3 stops once its 1 request(s) finish" in said
        pool.release(old)
        await settle(pool)
        assert state(old) is State.RETIRED and pool.engines == [new]
        await pool.tick()  # nothing new saved: nothing planned again
        assert plans.refreshed == 1

    asyncio.run(run())


def test_close_retires_every_engine_even_one_still_starting() -> None:
    async def run() -> None:
        gate = threading.Event()
        runner = FakeRunner(gate=gate)
        pool, _clock, _said = pool_of(["a", "b"], runner, start_wait=5.0)
        gate.set()
        ready = await pool.acquire("a")
        gate.clear()
        waiting = asyncio.ensure_future(pool.acquire("b"))
        await asyncio.sleep(0.05)
        starting = pool.current[Slot("b")]
        assert state(starting) is State.STARTING
        await pool.close()
        assert state(ready) is State.RETIRED and state(starting) is State.RETIRED
        with pytest.raises(StartFailed, match="stopped before it could take the request"):
            await waiting
        assert pool.engines == []

    asyncio.run(run())


def test_a_request_never_resolves(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans come from the start (and a saved tune): acquire resolves nothing."""
    async def run() -> None:
        pool, _clock, _said = pool_of(["a"], FakeRunner())
        monkeypatch.setattr(App, "resolve", lambda *_a, **_k: pytest.fail("resolved"))
        engine = await pool.acquire("a", Facts("code", 40))
        pool.release(engine)
        assert (await pool.acquire("a", Facts("chat", 40))) is engine

    asyncio.run(run())
