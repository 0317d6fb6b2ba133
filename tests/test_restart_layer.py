"""One restart layer: under a service manager (SPECCTL_MAX_RESTARTS=0, which the unit sets) the
supervisor does not restart a server that dies: it records the failure and exits with the
server's status, for the manager to restart and count. The server here is a real HTTP server
process (python -m http.server), killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil

from specctl.orchestrator.contract.launch import Launch
from specctl.orchestrator.runtime import state
from specctl.orchestrator.runtime.servers import free_port
from specctl.orchestrator.runtime.supervise import Policy, Supervisor, exit_status
from specctl.orchestrator.service import observe


def _supervisor(tmp_path: Path, max_restarts: int) -> tuple[Supervisor, Path]:
    port = free_port()
    launch = Launch(argv=(sys.executable, "-m", "http.server", str(port), "--bind",
                          "127.0.0.1"), health_url=f"http://127.0.0.1:{port}/",
                    base_url=f"http://127.0.0.1:{port}/v1")
    runs = tmp_path / "runs"
    runs.mkdir()
    me = psutil.Process()
    run = state.RunState(profile="web", supervisor_pid=me.pid,
                         supervisor_started=me.create_time(), url=launch.base_url, port=port,
                         host="127.0.0.1", log=str(tmp_path / "web.log"))
    policy = Policy(health_timeout=60, max_restarts=max_restarts, backoff_base=0.1, grace=3)
    return Supervisor(run, launch, runs, policy, say=lambda _m: None), runs


def _kill_when_running(runs: Path, times: int) -> list[int]:
    killed: list[int] = []

    def kill() -> None:
        deadline = time.monotonic() + 120
        while len(killed) < times and time.monotonic() < deadline:
            run = state.load(runs, "web")
            if run and run.status == "running" and run.server_pid not in killed:
                assert run.server_pid is not None
                killed.append(run.server_pid)
                os.kill(run.server_pid, signal.SIGKILL)
            time.sleep(0.05)

    threading.Thread(target=kill, daemon=True).start()
    return killed


def test_under_a_manager_the_supervisor_hands_a_crash_over_once(tmp_path: Path) -> None:
    sup, runs = _supervisor(tmp_path, max_restarts=0)
    killed = _kill_when_running(runs, times=1)
    assert sup.serve() == 128 + signal.SIGKILL  # the manager sees the server's status
    assert len(killed) == 1  # started once, never restarted here
    run = state.load(runs, "web")
    assert run is not None and run.status == "failed" and run.restarts == 0
    assert run.error is not None and run.error.startswith(
        "server exited with status 137; not restarted here (SPECCTL_MAX_RESTARTS=0")
    assert not psutil.pid_exists(killed[0]) or psutil.Process(killed[0]).status() == "zombie"


def test_on_its_own_the_supervisor_is_the_restart_layer(tmp_path: Path) -> None:
    sup, runs = _supervisor(tmp_path, max_restarts=1)
    killed = _kill_when_running(runs, times=2)
    assert sup.serve() == 1
    assert len(killed) == 2  # the first start, then one restart
    run = state.load(runs, "web")
    assert run is not None and run.status == "failed" and run.restarts == 1
    assert run.error is not None and "giving up" in run.error


def test_exit_status_of_a_server() -> None:
    assert [exit_status(rc) for rc in (-9, -15, 3, 0, None)] == [137, 143, 3, 1, 1]


SHOWN = """LoadState=loaded
ActiveState=activating
SubState=auto-restart
Result=exit-code
NRestarts=3
ExecMainCode=1
ExecMainStatus=137
"""


def test_the_managers_count_and_last_exit_are_read_from_systemctl_show() -> None:
    seen = observe.parse_systemd("specctl-web.service", SHOWN)
    assert seen is not None
    assert seen.summary() == ("systemd specctl-web.service: activating (auto-restart, "
                              "exit-code), 3 restarts by systemd, last exit status 137")
    gone = observe.parse_systemd("x.service", "LoadState=not-found\nActiveState=inactive\n")
    assert gone is None
