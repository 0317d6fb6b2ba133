"""Waiting is visible and fair: requests for a busy engine wait in line for its slots, first come
first served, within bounds (a 503 past them), counted in /metrics; an engine that fails hands
each waiting request its failure; a client that goes away while it waits costs no slot."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from specctl.orchestrator.gateway.engines import Engine, Slot
from specctl.orchestrator.gateway.line import MAX_WAITING, Busy, Line
from specctl.orchestrator.gateway.pool import StartFailed
from tests.test_pool_states import FakeRunner, pool_of


def test_a_free_slot_is_taken_at_once_and_the_rest_wait_in_turn() -> None:
    async def run() -> None:
        line, order = Line(2), []

        async def one(n: int) -> None:
            await line.enter(10, "m")
            order.append(n)

        await one(0)
        await one(1)
        waiting = [asyncio.create_task(one(n)) for n in (2, 3, 4)]
        await asyncio.sleep(0.01)
        assert order == [0, 1] and line.busy == 2 and len(line.waiting) == 3
        assert line.load == 5
        for _ in range(3):
            line.leave()
            await asyncio.sleep(0.01)
        assert order == [0, 1, 2, 3, 4] and line.busy == 2 and not line.waiting
        await asyncio.gather(*waiting)

    asyncio.run(run())


def test_past_the_bound_a_request_is_told_to_come_back() -> None:
    async def run() -> None:
        line = Line(1)
        await line.enter(1, "m")
        with pytest.raises(Busy, match=r"busy with 1 request.* for 0 s"):
            await line.enter(0.05, "m")
        assert line.busy == 1 and not line.waiting  # it left no trace
        line.waiting.extend(asyncio.get_running_loop().create_future()
                            for _ in range(MAX_WAITING))
        with pytest.raises(Busy, match=f"{MAX_WAITING} requests waiting"):
            await line.enter(5, "m")

    asyncio.run(run())


def test_a_client_gone_while_it_waits_costs_no_slot() -> None:
    async def run() -> None:
        line = Line(1)
        await line.enter(1, "m")
        gone = asyncio.create_task(line.enter(10, "m"))
        after = asyncio.create_task(line.enter(10, "m"))
        await asyncio.sleep(0.01)
        gone.cancel()
        await asyncio.sleep(0.01)
        line.leave()
        await asyncio.wait_for(after, 1)  # the slot went to the next in line
        assert line.busy == 1 and not line.waiting
        line.leave()
        assert line.busy == 0

    asyncio.run(run())


def test_an_engine_that_fails_hands_its_line_the_failure() -> None:
    async def run() -> None:
        runner = FakeRunner()
        pool, _clock, _said = pool_of(["a"], runner)
        engine = await pool.acquire("a")
        engine.line.slots = 1  # one slot: the next request waits
        waiting = asyncio.create_task(pool.acquire("a"))
        await asyncio.sleep(0.05)
        assert pool.load("a") == 2 and len(engine.line.waiting) == 1
        assert "specctl_gateway_queued_requests{model=\"a\"} 1.0" in \
            pool.metrics.render().decode()
        pool.fail(engine, "sent nothing within the first-byte bound")
        with pytest.raises(StartFailed, match="first-byte bound"):
            await waiting
        again = await pool.acquire("a")  # a new engine serves the next request
        assert again is not engine and pool.load("a") == 1

    asyncio.run(run())


def test_the_line_follows_the_plans_slots(tmp_path: Path) -> None:
    pool, _clock, _said = pool_of(["a"], FakeRunner())
    resolved = pool.plans.served["a"].resolved
    three = replace(resolved, plan=resolved.plan.but(parallel=3))
    assert Engine(Slot("a"), three, tmp_path / "x.log").line.slots == 3
