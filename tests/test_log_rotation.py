"""Logs: a server's log file (run by hand, or under launchd) is capped and rotated while the
server keeps writing to it; under systemd the output goes to the journal instead. The server
is a real HTTP server process (python -m http.server) that logs each request."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

from specctl.orchestrator.contract.launch import Launch
from specctl.orchestrator.runtime import procs, state
from specctl.orchestrator.runtime.servers import free_port
from specctl.orchestrator.runtime.supervise import Policy, Supervisor


def test_the_log_is_capped_and_rotated_while_the_server_writes(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    launch = Launch(argv=(sys.executable, "-m", "http.server", str(port), "--bind",
                          "127.0.0.1"), health_url=url, base_url=url + "v1")
    runs, log = tmp_path / "runs", tmp_path / "web.log"
    runs.mkdir()
    me = psutil.Process()
    run = state.RunState(profile="web", supervisor_pid=me.pid,
                         supervisor_started=me.create_time(), url=launch.base_url, port=port,
                         host="127.0.0.1", log=str(log))
    cap = 4000
    sup = Supervisor(run, launch, runs, Policy(health_timeout=60, grace=3, log_max_bytes=cap,
                                               log_backups=2), say=lambda _m: None)
    seen: list[int] = []

    def traffic() -> None:
        deadline = time.monotonic() + 120
        while not procs.healthy(url) and time.monotonic() < deadline:
            time.sleep(0.1)
        for i in range(400):  # about 80 bytes of access log each: 8 times the cap
            httpx.get(f"{url}?request={i}", timeout=10)
            if i % 20 == 0:
                time.sleep(0.3)  # the supervisor checks the size every 2 s
                seen.append(log.stat().st_size)
        time.sleep(2.5)
        sup.stopping = True

    threading.Thread(target=traffic, daemon=True).start()
    assert sup.serve() == 0
    files = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("web.log"))
    assert files == ["web.log", "web.log.1", "web.log.2"]  # two backups kept, no more
    assert max(seen) < 4 * cap  # capped, not growing for ever (checked every 2 s)
    assert (tmp_path / "web.log.1").stat().st_size > cap
    last = (tmp_path / "web.log.1").read_text() + log.read_text()
    assert "request=399" in last  # the server kept writing into the truncated file


def test_follow_reads_on_after_a_rotation(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("old line\n" * 100)
    got: list[str] = []

    def rotate_then_write() -> None:
        time.sleep(0.5)
        assert procs.rotate(str(log), 10, 1)
        with log.open("a") as fh:
            fh.write("after rotation\n")

    threading.Thread(target=rotate_then_write).start()
    procs.follow(str(log), got.append, sleep=lambda s: time.sleep(0.05),
                 until=lambda: "after rotation" in got)
    assert got == ["after rotation"]


def test_the_journal_is_recognised_by_its_stream() -> None:
    read, write = os.pipe()
    try:
        st = os.fstat(write)
        assert procs.journal_connected({"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}, write)
        assert not procs.journal_connected({"JOURNAL_STREAM": "1:2"}, write)
        assert not procs.journal_connected({}, write)
    finally:
        os.close(read)
        os.close(write)
