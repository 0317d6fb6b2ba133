"""runtime/server.Server and its leash against real processes: an owner that dies (SIGKILL) takes
its servers' whole groups with it; the exit status a supervisor reads is the server's own; a
server becomes healthy, fails in one line with its log, and stops whole. The servers are real
HTTP servers (python -m http.server) and sleeping children; the owners are real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from specctl.orchestrator.errors import ServerError
from specctl.orchestrator.runtime import leash, procs, servers
from specctl.orchestrator.runtime.server import NotHealthy, Server, leashed, owner_fd

ROOT = Path(__file__).resolve().parent.parent

# an owner: starts a server that starts a grandchild in its group, prints both pids, waits
OWNER = textwrap.dedent("""
    import json, sys, time
    from specctl.orchestrator.runtime.server import Server
    child = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
             "'import time; time.sleep(600)']); time.sleep(600)")
    srv = Server.spawn([sys.executable, "-c", child], {}, sys.argv[1], "test", grace=1.0)
    print(json.dumps({"leash": srv.pid}), flush=True)
    time.sleep(600)
""")


def _gone(pgid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not procs.group_members(pgid):
            return True
        time.sleep(0.05)
    return False


def _grown(pgid: int, members: int) -> None:
    deadline = time.monotonic() + 30
    while len(procs.group_members(pgid)) < members and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(procs.group_members(pgid)) >= members, procs.group_members(pgid)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_server_dies_with_its_owner_however_the_owner_ends(tmp_path: Path,
                                                             how: signal.Signals) -> None:
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path / "s.log")],
                             stdout=subprocess.PIPE, cwd=ROOT)
    assert owner.stdout is not None
    pgid = json.loads(owner.stdout.readline())["leash"]
    try:
        _grown(pgid, 3)  # the leash, the server, the server's own child
        owner.send_signal(how)
        owner.wait(timeout=10)
        assert _gone(pgid, 5), procs.group_members(pgid)  # the acceptance bound: 5 s
    finally:
        owner.kill()
        procs.stop_group(pgid, grace=0.1)


def test_the_exit_status_is_the_servers_own(tmp_path: Path) -> None:
    log = str(tmp_path / "x.log")
    assert Server.spawn([sys.executable, "-c", "raise SystemExit(3)"], {}, log, "t").proc.wait(
        timeout=30) == 3
    killed = Server.spawn([sys.executable, "-c", "import time; time.sleep(60)"], {}, log, "t")
    _grown(killed.pid, 2)
    child = next(p for p in psutil.Process(killed.pid).children())
    child.send_signal(signal.SIGKILL)
    assert killed.proc.wait(timeout=30) == -signal.SIGKILL  # as if it were the server
    missing = Server.spawn(["/nonexistent/engine"], {}, log, "t")
    assert missing.proc.wait(timeout=30) == 127
    assert "cannot start /nonexistent/engine" in Path(log).read_text()


def test_stop_signals_the_group_once_and_a_leash_killed_alone_leaves_no_group(
        tmp_path: Path) -> None:
    """A SIGTERM to the group reaches the server once (the leash does not forward a second
    one: llama-server takes a second as "exit now"); a SIGKILLed leash leaves its server
    running in the group, and stop() ends it."""
    counts = tmp_path / "terms"
    child = (f"import signal, sys, time\nn = 0\ndef term(*_):\n    global n\n    n += 1\n"
             f"    open({str(counts)!r}, 'w').write(str(n))\n    time.sleep(0.3)\n"
             f"    sys.exit(0)\nsignal.signal(signal.SIGTERM, term)\ntime.sleep(60)\n")
    srv = Server.spawn([sys.executable, "-c", child], {}, str(tmp_path / "x.log"), "t", 3.0)
    _grown(srv.pid, 2)
    time.sleep(0.3)  # its handler is set
    srv.stop()
    assert srv.exit_code == 0 and counts.read_text() == "1"
    alone = Server.spawn([sys.executable, "-c", "import time; time.sleep(60)"], {},
                         str(tmp_path / "y.log"), "t", 3.0)
    _grown(alone.pid, 2)
    os.kill(alone.pid, signal.SIGKILL)
    assert alone.proc.wait(timeout=10) == -signal.SIGKILL
    assert procs.group_members(alone.pid)  # the server itself is still there
    alone.stop()
    assert procs.group_members(alone.pid) == []


def test_health_setup_and_a_failed_start_in_one_line(tmp_path: Path) -> None:
    from specctl.orchestrator.contract.launch import Launch

    port = servers.free_port()
    web = Launch(argv=(sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"),
                 health_url=f"http://127.0.0.1:{port}/", base_url=f"http://127.0.0.1:{port}/v1")
    srv = servers.spawn(web, tmp_path / "web.log", "web")
    try:
        servers.ready(srv, web, "web", 60)
        assert srv.alive and srv.identity()[1][:3] == leashed([], owner_fd(), 10)[:3]
    finally:
        srv.stop()
    assert srv.exit_code is not None
    assert procs.group_members(srv.pid) == []
    broken = Launch(argv=(sys.executable, "-c", "print('bad flag --x'); raise SystemExit(2)"),
                    health_url=f"http://127.0.0.1:{servers.free_port()}/")
    bad = servers.spawn(broken, tmp_path / "bad.log", "bad")
    with pytest.raises(ServerError, match=r"bad server exited with code 2 while starting:\n"
                       r"(.|\n)*bad flag --x"):
        servers.ready(bad, broken, "bad", 60)
    late = servers.spawn(Launch(argv=(sys.executable, "-c", "import time; time.sleep(60)"),
                                health_url=f"tcp://127.0.0.1:{servers.free_port()}"),
                         tmp_path / "late.log", "late")
    with pytest.raises(NotHealthy, match="start called off") as off:
        late.wait_healthy(f"tcp://127.0.0.1:{servers.free_port()}", (), 60, lambda: True)
    assert off.value.called_off
    late.stop()


def test_the_leash_starts_fast_and_names_its_flags() -> None:
    """The leash imports nothing heavy: its own start is a few milliseconds past the
    interpreter's (measured here against a bare interpreter, not an absolute time)."""
    assert leash.parse(["--fd", "5", "--", "a", "--fd"]).argv == ["a", "--fd"]
    done = subprocess.run([sys.executable, "-I", "-X", "importtime", leash.__file__],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "--fd" in done.stderr
    imported = {ln.split("|")[-1].strip() for ln in done.stderr.splitlines() if "|" in ln}
    assert not {"specctl", "psutil", "pydantic", "httpx", "requests"} & imported
