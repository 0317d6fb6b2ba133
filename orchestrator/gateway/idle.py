"""Tune in the background while the gateway is idle: a profile with k = "auto" that serves the
cost model's untuned setting is tuned (`specctl tune -p NAME`) once no request has come for a
while; a request stops that tune at once (serving comes first) and it is tried again at the
next idle spell, a few times at most. The tune runs as a runtime/server.Server, like an engine
(its own process group, leashed to the gateway, stopped whole), with no health URL. When the
tune saves a setting that pays, the pool's watch on the tuned results swaps it in. A profile
opts out with `[gateway] tune_when_idle = false`.

What it tunes on: the model's own kept traffic (`[gateway] keep_traffic`, `specctl tune
--prompts traffic`) once it holds enough (measure/traffic/replay.enough: 40 requests, so that every
kind replayed has the two requests a settled tune needs), else the shipped suites; the log line says
which. The kept file is read when a tune starts (an idle gateway: no request in flight)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specctl.orchestrator.errors import SpecctlError
from specctl.orchestrator.files import inside
from specctl.orchestrator.gateway.pool import Pool
from specctl.orchestrator.measure.traffic import replay
from specctl.orchestrator.measure.traffic import store as traffic
from specctl.orchestrator.runtime.server import Server

UNTUNED = "cost model"  # a plan's k_source when no saved tune set it
TRIES = 3


@dataclass
class IdleTuner:
    pool: Pool
    refs: dict[str, str]  # model -> the profile name or file it was given as
    after: float  # seconds without requests before a tune starts
    logs: Path
    clock: Callable[[], float] = time.monotonic
    proc: Server | None = None
    model: str = ""
    tries: dict[str, int] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    grace: float = 30.0  # a tune stops its own servers on SIGTERM: give it the time
    # tick and traffic run in worker threads, several requests' at once
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def wanted(self) -> list[str]:
        """Models serving an untuned setting that may be tuned now (alone, or in the plain
        route an untuned model is served by: its setting and no draft)."""
        out: list[str] = []
        for engine in self.pool.current.values():
            name = engine.model
            profile = self.pool.profiles[name]
            if (name not in out and engine.usable and engine.plan.k_source == UNTUNED
                    and profile.k == "auto" and profile.gateway.tune_when_idle
                    and name not in self.done and self.tries.get(name, 0) < TRIES):
                out.append(name)
        return out

    def tick(self) -> None:
        """On the event loop (it reads the pool): start or reap a tune. Skipped while a
        request's thread is stopping the tune."""
        if self._lock.acquire(blocking=False):
            try:
                self._tick()
            finally:
                self._lock.release()

    def _tick(self) -> None:
        if self.proc is not None:
            code = self.proc.exit_code
            if code is None:
                return
            self.pool.say(f"background tune of {self.model} ended ({code}); see "
                          f"{self._log(self.model)}")
            if code == 0:
                self.done.add(self.model)
            self.proc = None
            return
        busy = any(e.inflight for e in self.pool.resident())
        if busy or self.clock() - self.pool.last_request < self.after:
            return
        wanted = self.wanted()
        if wanted:
            self._start(wanted[0])

    def _log(self, model: str) -> Path:
        return inside(self.logs, model, ".log", "model name", prefix="gateway-tune-")

    def argv(self, model: str) -> tuple[list[str], str]:
        """The tune to run for `model` and what it tunes on, in words: its kept traffic where
        that is enough (replay.enough), else the shipped suites."""
        argv = [sys.executable, "-m", "specctl", "tune", "--profile", self.refs[model]]
        keep = self.pool.profiles[model].gateway.keep_traffic
        if keep <= 0:
            return argv, "on the shipped suites"
        try:
            kept = traffic.load(self.pool.plans.app.dirs, model)
        except SpecctlError as exc:  # set aside (said): the suites
            self.pool.say(f"traffic of {model}: {exc}")
            kept = None
        count = len(kept.requests) if kept is not None else 0
        if replay.enough(kept):
            return [*argv, "--prompts", "traffic"], f"on its kept traffic ({count} requests)"
        return argv, (f"on the shipped suites (its kept traffic has {count} requests; "
                      f"{replay.ENOUGH} with two of a kind are needed)")

    def _start(self, model: str) -> None:
        self.model = model
        self.tries[model] = self.tries.get(model, 0) + 1
        argv, on = self.argv(model)
        self.pool.say(f"idle: tuning {model} in the background {on} (try {self.tries[model]} "
                      f"of {TRIES}; a request stops it)")
        self.proc = Server.spawn(argv, os.environ, str(self._log(model)), f"tune {model}",
                                 self.grace)

    def traffic(self) -> None:
        """A request came: stop a running tune (blocking: call it in a thread)."""
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        if self.proc is None or not self.proc.alive:
            return
        self.pool.say(f"request: stopping the background tune of {self.model}")
        self.proc.stop(self.grace)
        self.proc = None

    def close(self) -> None:
        self.traffic()
