"""The gateway's kept traffic (opt-in: `[gateway] keep_traffic = N`): each request answered 200
to a model that keeps traffic is recorded (measure/traffic/store.py: its body as received, after the
intake checks, read in its API's format: another API's body is kept as the chat request it
amounts to, or not kept where it is none, as store.py says; the router's kind, the prompt's
tokens and the reply's), by one worker thread, in the order the requests finished.

Never in the request's way: the event loop only puts the request on a bounded queue (a full
queue, or a write that fails, leaves that request unkept); nothing here raises into the gateway.
What goes wrong is one line in the gateway's log, said once per model and kind of failure (a
failing disk is not a line per request); a file found corrupt and set aside is said each time
(it is the user's data, and rare). Only the body reaches the store: never a header, a key or the
client's address (the relay does not hand them over)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.measure.prompts import bodies
from specctl.orchestrator.measure.traffic import store as traffic
from specctl.orchestrator.measure.traffic.kept import MAX_TOKENS

DEPTH = 64  # requests waiting to be written; a write takes about 0.1 ms
CLOSE_WAIT = 5.0  # seconds the gateway's stop waits for the queue to be written



@dataclass(frozen=True)
class _Job:
    model: str
    keep: int
    body: Mapping[str, Any]
    kind: str
    tokens_in: int
    tokens_out: int
    fmt: str = bodies.CHAT


class Keeper:
    def __init__(self, dirs: Dirs, say: Say, depth: int = DEPTH) -> None:
        self.dirs, self.say = dirs, say
        self._queue: queue.Queue[_Job | None] = queue.Queue(maxsize=depth)
        self._thread: threading.Thread | None = None
        self._said: set[tuple[str, str]] = set()
        self._start = threading.Lock()
        self.written = 0  # requests the worker has handled (kept or not), for tests and status

    def keep(self, model: str, keep: int, body: Mapping[str, Any], kind: str, tokens_in: int,
             tokens_out: int, fmt: str = bodies.CHAT) -> None:
        """On the event loop: queue the request (a body of its API's format `fmt`) for its
        model's file (`keep`: the profile's keep_traffic; 0 keeps nothing). Never blocks, never
        raises."""
        if keep <= 0:
            return
        job = _Job(model, keep, body, kind, min(max(tokens_in, 0), MAX_TOKENS),
                   min(max(tokens_out, 0), MAX_TOKENS), fmt)
        try:
            self._running()
            self._queue.put_nowait(job)
        except queue.Full:
            self._once(model, "behind", f"traffic of {model}: requests come faster than they "
                       f"are written ({self._queue.maxsize} waiting); those are not kept")
        except RuntimeError as exc:  # no thread could be started
            self._once(model, "thread", f"traffic of {model} is not kept: {exc}")

    def _running(self) -> None:
        with self._start:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="specctl-traffic",
                                                daemon=True)
                self._thread.start()

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            try:
                self._write(job)
            finally:
                self.written += 1

    def _write(self, job: _Job) -> None:
        try:
            done = traffic.record(self.dirs, job.model, job.body, job.kind, job.tokens_in,
                                  job.tokens_out, keep=job.keep, fmt=job.fmt)
        except Exception as exc:  # a disk, a folder, a bug: never the request's
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self._once(job.model, "error", f"traffic of {job.model} is not being kept: {why} "
                       "(said once; the requests are served)")
            return
        if done.skipped:
            self._once(job.model, "large", f"traffic of {job.model}: {done.note} (counted; "
                       "said once)")
        elif done.note and done.kept:  # a corrupt file set aside, a new one begun
            self.say(f"traffic of {job.model}: {done.note}")

    def _once(self, model: str, what: str, line: str) -> None:
        if (model, what) not in self._said:
            self._said.add((model, what))
            self.say(line)

    def close(self, wait: float = CLOSE_WAIT) -> None:
        """Blocking (call it in a thread): the requests queued are written, for up to `wait`
        seconds, then the worker ends."""
        thread = self._thread
        if thread is None:
            return
        try:
            self._queue.put(None, timeout=wait)
        except queue.Full:
            return
        thread.join(wait)
