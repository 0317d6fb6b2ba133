"""procs.stop_group against a real process group."""

from __future__ import annotations

import subprocess
import sys
import time

from specctl.orchestrator.runtime import procs

IGNORES_TERM = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('ready', flush=True); time.sleep(60)")


def test_stop_group_kills_a_group_that_ignores_sigterm_after_the_grace() -> None:
    proc = subprocess.Popen([sys.executable, "-c", IGNORES_TERM], stdout=subprocess.PIPE,
                            start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        started = time.monotonic()
        assert procs.stop_group(proc.pid, grace=0.5) is True
        took = time.monotonic() - started
        assert procs.group_members(proc.pid) == []
        assert proc.wait(timeout=5) == -9  # SIGKILL: the SIGTERM was ignored
        assert 0.5 <= took < 5, took
        assert procs.stop_group(proc.pid, grace=0.5) is False  # nothing left to stop
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
