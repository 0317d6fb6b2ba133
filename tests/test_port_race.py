"""Two runs of two profiles on one port, their supervisors started at the same instant (issue 54):
both find the port free; the second to take the port fails in one line and leaves nothing.
The servers are real HTTP servers (python -m http.server: a tenth of a second from spawn to
bind, the window in which both checks pass); the supervisors are real processes, started
together at an agreed wall-clock time."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

from specctl.orchestrator.runtime import procs
from specctl.orchestrator.runtime.servers import free_port

ROOT = Path(__file__).resolve().parent.parent

RUN = textwrap.dedent("""
    import sys, time
    from specctl.orchestrator import runs
    from specctl.orchestrator.app import App
    from specctl.orchestrator.contract.launch import Launch
    from specctl.orchestrator.errors import SpecctlError
    from specctl.orchestrator.runtime import handoff, state
    name, port, at = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    url = f"http://127.0.0.1:{port}/"
    launch = Launch(argv=(sys.executable, "-m", "http.server", str(port), "--bind",
                          "127.0.0.1"), health_url=url, base_url=url + "v1")
    ready = handoff.Ready.of(name, "127.0.0.1", port, "web", launch, [], {})
    app = App.from_env()
    while time.time() < at:
        time.sleep(0.0005)
    try:
        with state.profile_lock(app.dirs.runs, name):
            sys.exit(runs.supervise_launch(app, ready, lambda line: print(line, flush=True)))
    except SpecctlError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
""")


def test_the_second_supervisor_on_a_port_fails_in_one_line_and_leaves_nothing(
        tmp_path: Path) -> None:
    port = free_port()
    at = time.time() + 3.0  # both import and load first, then go together
    both = {name: subprocess.Popen([sys.executable, "-c", RUN, name, str(port), str(at)],
                                   cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True) for name in ("one", "two")}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and all(p.poll() is None for p in both.values()):
            time.sleep(0.1)
        losers = {n: p for n, p in both.items() if p.poll() is not None}
        assert len(losers) == 1, "one of the two must give up at once"
        (name, loser), = losers.items()
        _out, err = loser.communicate()
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert loser.returncode == 1 and len(lines) == 1, err
        assert lines[0].startswith(f"error: port {port} is in use"), lines[0]
        assert not (tmp_path / "state" / "runs" / f"{name}.json").exists()
        time.sleep(1.0)
        winner = next(p for p in both.values() if p is not loser)
        assert winner.poll() is None and procs.healthy(f"http://127.0.0.1:{port}/")
        listeners = {c.pid for c in psutil.net_connections("tcp")
                     if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN}
        assert len(listeners) == 1
    finally:
        for proc in both.values():
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
    assert not procs.healthy(f"http://127.0.0.1:{port}/")  # the winner stopped its server
