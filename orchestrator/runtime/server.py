"""One server process, whoever runs it: `up`'s supervisor (which adds its restart policy on
top), bench and tune (runtime/servers.py), the gateway's engines and its idle tuner's `specctl
tune` child. The one place that starts an engine and the one place that stops it.

A server runs in its own session and process group, under the leash (runtime/leash.py): it
dies with this process, however this process ends. Its output goes to its log file (0600,
appended), or, under systemd, to this process's stdout: the journal. It is healthy when its
launch's health URL answers 200 (one of `health_failed` means its start failed); the backend's
post-start requests (`setup`, e.g. Ollama's model to load) follow. It stops whole: SIGTERM to
the group, SIGKILL after the grace, the leader reaped. Its identity (create time and command
line of the group's leader, the leash) is what state files record, so that a later command
signals the group only while it is still this one (`procs.ours`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import IO

from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_exponential

from specctl.orchestrator import http
from specctl.orchestrator.contract.launch import HttpCall, Launch
from specctl.orchestrator.errors import ServerError
from specctl.orchestrator.files import open_private
from specctl.orchestrator.runtime import leash, procs

Sleep = Callable[[float], None]


class NotHealthy(ServerError):
    """The server did not become healthy: it exited (`exited`), its health check said its
    start failed, it was not healthy in time, or its owner called the start off (`called_off`).
    The message says which, without the log's lines (the caller adds them as it reports)."""

    def __init__(self, what: str, exited: bool = False, called_off: bool = False) -> None:
        super().__init__(what)
        self.exited, self.called_off = exited, called_off


def server_env(launch: Launch, base: Mapping[str, str]) -> dict[str, str]:
    """The server's environment; the API key copied from the user's variable, which must be
    set and not empty (an empty key would serve without authentication)."""
    env = {**base, **launch.env}
    for var, source in launch.env_from.items():
        if not base.get(source):
            raise ServerError(f"the profile reads the API key from ${source}, which is "
                              f"{'empty' if source in base else 'not set'}; export "
                              f"{source}=... first")
        env[var] = base[source]
    return env


_owner_lock = threading.Lock()
_owner_ends: dict[int, tuple[int, int]] = {}  # pid -> (read end, write end), for its life


def owner_fd() -> int:
    """The read end of this process's owner pipe, made once per process. The write end stays
    open until the process ends and is never inherited (os.pipe's ends are not), so a leash
    reads end of file exactly when this process is gone."""
    with _owner_lock:
        ends = _owner_ends.get(os.getpid())
        if ends is None:
            ends = _owner_ends[os.getpid()] = os.pipe()
        return ends[0]


def leashed(argv: Sequence[str], fd: int, grace: float) -> list[str]:
    """`argv` under the leash. The leash runs isolated (-I, by its file): the server's own
    environment (PYTHONPATH, PYTHONHOME of a backend's Python) cannot change it."""
    return [sys.executable, "-I", leash.__file__, "--fd", str(fd), "--grace", f"{grace:g}",
            "--", *argv]


class Server:
    """A server this process started: alive or not, its exit code, its identity; wait for it
    to be healthy, set it up, stop it."""

    def __init__(self, proc: subprocess.Popen[bytes], log: str, label: str,
                 grace: float) -> None:
        self.proc, self.log, self.label, self.grace = proc, log, label, grace

    @classmethod
    def spawn(cls, argv: Sequence[str], env: Mapping[str, str], log: str, label: str,
              grace: float = 10.0) -> Server:
        """Start `argv` in its own session/process group under the leash, output appended to
        `log` (its header line first), or, under systemd (`log` is procs.JOURNAL), to this
        process's stdout: the journal."""
        fd = owner_fd()
        with contextlib.ExitStack() as stack:
            out: int | IO[bytes] | None = None  # None: this process's stdout (the journal)
            if log == procs.JOURNAL:
                print(f"=== specctl: {label}", flush=True)
            else:  # 0600: a log may hold prompts
                out = stack.enter_context(os.fdopen(open_private(Path(log)), "ab"))
                out.write(f"\n=== specctl: {label} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
                          .encode())
                out.flush()
            proc = subprocess.Popen(leashed(argv, fd, grace), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, env=dict(env),
                                    start_new_session=True, pass_fds=(fd,))
        return cls(proc, log, label, grace)

    @property
    def pid(self) -> int:
        """The group's leader (the leash), which is also the group's id."""
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def exit_code(self) -> int | None:
        """None while it runs; the child's code, or -N for a signal N, once it exited."""
        return self.proc.poll()

    def identity(self) -> tuple[float | None, list[str]]:
        """(create time, command line) of the group's leader, for a state file."""
        found = procs.identity(self.proc.pid)
        return found if found is not None else (None, [])

    def tail(self, lines: int = 15, skip: str = "") -> str:
        return procs.tail(self.log, lines, skip)

    def wait_healthy(self, url: str, failed: Collection[int], timeout: float,
                     abort: Callable[[], bool] = lambda: False, sleep: Sleep = time.sleep) -> None:
        """Return once `url` answers 200 (for tcp://host:port, once it accepts a connection).
        NotHealthy if the server exits, answers one of `failed`, is not healthy within
        `timeout` s, or `abort()` calls the start off."""

        def check() -> bool:
            if abort():
                raise NotHealthy("start called off", called_off=True)
            code = self.proc.poll()
            if code is not None:
                raise NotHealthy(f"exited with code {code} while starting", exited=True)
            status = procs.health(url)
            if status in failed:
                raise NotHealthy(f"answered {status} to its health check: its start failed")
            return status == 200

        try:
            Retrying(stop=stop_after_delay(timeout), retry=retry_if_result(lambda ok: not ok),
                     wait=wait_exponential(multiplier=0.05, max=0.5), sleep=sleep)(check)
        except RetryError:
            raise NotHealthy(f"not healthy after {timeout:.0f} s") from None

    def setup(self, calls: Sequence[HttpCall], timeout: float = 600.0) -> None:
        """The backend's post-start requests (Ollama: create the derived model, load it)."""
        for call in calls:
            try:
                resp = http.request(call.method, call.url, json=dict(call.body),
                                    timeout=timeout)
            except http.Unreachable as exc:
                raise ServerError(f"setup request failed: {exc}") from None
            if resp.status_code >= 400:
                raise ServerError(f"setup request {call.method} {call.url} answered "
                                  f"{resp.status_code}: {resp.text[:200]}")

    def stop(self, grace: float | None = None) -> None:
        """Stop the whole group (SIGTERM, SIGKILL after the grace; what is left of a group
        whose leader already exited too) and reap the leader."""
        procs.stop_group(self.proc.pid, self.grace if grace is None else grace)
        if self.proc.poll() is None:
            self.proc.wait(timeout=5)
