"""Supervise one server: bounded restarts on top of runtime/server.Server (own process group,
log file, health wait, clean stop, leashed to the supervisor), and its state kept current.

The supervisor runs under the profile's lock (taken by the caller) and keeps the state current.
SIGTERM/SIGINT stop the whole server group (SIGKILL after the grace period), then remove the state.
A first start that never becomes healthy fails at once with the log's last lines; a server that
was healthy and then dies is restarted with exponential backoff, up to `max_restarts` in a row.

One restart layer: under a service manager the unit sets max_restarts = 0 (SPECCTL_MAX_RESTARTS),
so the supervisor does not restart; it exits with the server's status (128 + the signal for a
killed one) and the manager restarts it, with its own limits (systemd's Restart=on-failure,
StartLimitBurst=), and counts the restarts (`service status`, `status`).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

from specctl.orchestrator.contract.launch import Launch
from specctl.orchestrator.errors import ServerError
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.runtime import procs, state
from specctl.orchestrator.runtime.server import NotHealthy, Server, server_env


@dataclass(frozen=True)
class Policy:
    health_timeout: float = 300.0  # a cold 3.5 GB F16 load took 54 s on 2 cores
    max_restarts: int = 5
    backoff_base: float = 1.0
    backoff_max: float = 30.0
    stable_after: float = 60.0  # healthy this long: the restart count starts again
    grace: float = 10.0  # SIGTERM, then SIGKILL
    log_max_bytes: int = 10 << 20  # the log file is rotated past this (not the journal)
    log_backups: int = 3


def exit_status(rc: int | None) -> int:
    """A server's return code as a process exit status: 128 + N for a signal N, never 0."""
    if rc is None or rc == 0:
        return 1
    return 128 - rc if rc < 0 else rc


class Stopping(Exception):
    """Raised inside waits once a stop signal arrived."""


class Supervisor:
    def __init__(self, run: state.RunState, launch: Launch, runs_dir: Path,
                 policy: Policy = Policy(), say: Say = print,
                 sleep: Callable[[float], None] = time.sleep,
                 base_env: Mapping[str, str] | None = None) -> None:
        self.run, self.launch, self.runs = run, launch, runs_dir
        self.policy, self.say, self.sleep = policy, say, sleep
        self.env = server_env(launch, os.environ if base_env is None else base_env)
        self.server: Server | None = None
        self.stopping = False

    # -- lifecycle -------------------------------------------------------------------------
    def serve(self) -> int:
        """Run until stopped (0) or until the server cannot be kept up (1). The caller holds the
        profile's lock. A failed run leaves its state (status "failed", the error) for `status`;
        a stopped one removes it."""
        previous = {s: signal.signal(s, self._on_signal)
                    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        try:
            code = self._loop()
        except Stopping:
            code = 0
        finally:
            self._stop_server()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self.run.status != "failed":
                state.remove(self.runs, self.run.profile)
        return code

    def _loop(self) -> int:
        crashes = 0
        while True:
            procs.ensure_port_free(self.run.host, self.run.port)
            self._spawn()
            first = self.run.restarts == 0 and crashes == 0
            healthy_at = self._wait_healthy(first)
            if healthy_at is not None and not self._setup(first):
                healthy_at = None
            if healthy_at is not None:
                self._set(status="running", error=None, **self._server_identity())
                self.say(f"serving {self.run.profile} at {self.launch.base_url}")
                rc = self._wait_exit()
                if self.stopping:  # a manager's stop signals the whole group at once
                    raise Stopping
                if time.monotonic() - healthy_at > self.policy.stable_after:
                    crashes = 0
            else:
                rc = self.server.exit_code if self.server else None
            self._stop_server()  # what is left of its group (its leader may have died alone)
            crashes += 1
            if self.policy.max_restarts == 0:
                return self._hand_over(rc)
            if crashes > self.policy.max_restarts:
                msg = (f"server crashed {crashes} times in a row (last exit {rc}); giving up. "
                       f"Last log lines:\n{procs.tail(self.run.log)}")
                self._set(status="failed", error=msg)
                self.say(msg)
                return 1
            delay = min(self.policy.backoff_max, self.policy.backoff_base * 2 ** (crashes - 1))
            self._set(status="restarting", restarts=self.run.restarts + 1,
                      error=f"server exited ({rc}); restart {crashes}/{self.policy.max_restarts}"
                            f" in {delay:.0f} s")
            self.say(self.run.error or "")
            self._pause(delay)

    def _hand_over(self, rc: int | None) -> int:
        """No restarts here (a service manager's are the one layer): record the failure and
        exit with the server's status, which the manager then reports."""
        code = exit_status(rc)
        msg = (f"server exited with status {code}; not restarted here (SPECCTL_MAX_RESTARTS=0: "
               f"restarts are the service manager's). {self._last_lines()}")
        self._set(status="failed", error=msg)
        self.say(msg)
        return code

    def _last_lines(self, skip: str = "") -> str:
        if self.run.log == procs.JOURNAL:  # the server's output went to the journal
            return f"Its log is in the journal: `specctl logs {self.run.profile}`"
        return f"Last log lines of {self.run.log}:\n{procs.tail(self.run.log, skip=skip)}"

    def _setup(self, first: bool) -> bool:
        """The backend's post-start requests; one that fails is a failed start."""
        assert self.server is not None
        try:
            self.server.setup(self.launch.setup)
        except ServerError as exc:
            self._stop_server()
            self._fail(str(exc), first)
            return False
        return True

    def _spawn(self) -> None:
        self.server = Server.spawn(self.launch.argv, self.env, self.run.log,
                                   f"starting {self.run.profile}", self.policy.grace)
        self._set(server_pid=self.server.pid, server_pgid=self.server.pid,
                  **self._server_identity())

    def _server_identity(self) -> dict[str, object]:
        """Create time and command line of the server's group leader, recorded so that `down`
        signals its group only while it is still this server."""
        started, cmdline = self.server.identity() if self.server is not None else (None, [])
        return {"server_started": started, "server_cmdline": cmdline}

    def _wait_healthy(self, first: bool) -> float | None:
        """Monotonic time it became healthy; None if it died first (restartable). A first start
        that fails raises: a broken model or flag will not heal by restarting."""
        assert self.server is not None
        try:
            self.server.wait_healthy(self.launch.health_url, self.launch.health_failed,
                                     self.policy.health_timeout, lambda: self.stopping,
                                     self.sleep)
        except NotHealthy as exc:
            if exc.called_off:
                raise Stopping from None
            self._stop_server()
            self._fail(f"server {exc}", first)
            return None
        return time.monotonic()

    def _fail(self, what: str, first: bool) -> None:
        skip = urlsplit(self.launch.health_url).path or ""
        msg = f"{what}. {self._last_lines(skip if skip not in ('', '/') else '')}"
        if first:
            self._set(status="failed", error=msg)
            raise ServerError(msg)

    def _wait_exit(self) -> int | None:
        assert self.server is not None
        checked = time.monotonic()
        while self.server.alive:
            if self.stopping:
                raise Stopping
            if self.run.log != procs.JOURNAL and time.monotonic() - checked > 2.0:
                procs.rotate(self.run.log, self.policy.log_max_bytes, self.policy.log_backups)
                checked = time.monotonic()
            self.sleep(0.2)
        return self.server.exit_code

    def _pause(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.stopping:
                raise Stopping
            self.sleep(min(0.2, seconds))

    def _stop_server(self) -> None:
        if self.server is not None:
            self.server.stop(self.policy.grace)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stopping = True

    def _set(self, **changes: object) -> None:
        for key, value in changes.items():
            setattr(self.run, key, value)
        state.save(self.runs, self.run)
