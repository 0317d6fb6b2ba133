"""Process groups: find, signal and reap every process of a server's group, and free ports."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

import psutil
import requests
from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from specctl.orchestrator.errors import ServerError


def group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return members


def stop_group(pgid: int, grace: float = 10.0, sleep: Callable[[float], None] = time.sleep) -> bool:
    """SIGTERM the whole group, SIGKILL what is left after `grace` s. True if any was running.

    vLLM's EngineCore and workers outlive a killed API server, so the group, not the parent."""
    if not group_members(pgid):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    if not _gone_within(pgid, grace, 0.1, sleep):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        _gone_within(pgid, 5.0, 0.05, sleep)
    return True


def _gone_within(pgid: int, timeout: float, every: float, sleep: Callable[[float], None]) -> bool:
    """Poll until no live member of the group is left: True, or False after `timeout` s.

    Not psutil.wait_procs: it reaps a zombie leader that is our own child (Popen's returncode
    would read 0) and waits on zombies that nobody reaps; group_members skips zombies."""
    try:
        Retrying(stop=stop_after_delay(timeout), wait=wait_fixed(every),
                 retry=retry_if_result(bool), sleep=sleep)(group_members, pgid)
    except RetryError:
        return False
    return True


def port_owner(port: int) -> str:
    with contextlib.suppress(psutil.Error, PermissionError):
        for conn in psutil.net_connections(kind="inet"):
            listening = conn.laddr and conn.laddr.port == port and conn.status == "LISTEN"
            if listening and conn.pid:
                with contextlib.suppress(psutil.Error):
                    return f" by {psutil.Process(conn.pid).name()} (pid {conn.pid})"
    return ""


def ensure_port_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise ServerError(
                    f"port {port} on {host} is in use{port_owner(port)}; stop that server or "
                    f"pick another port (server.port in the profile, or SPECCTL_SERVER__PORT)"
                ) from None
            raise ServerError(f"cannot bind {host}:{port}: {exc.strerror}") from None


def healthy(url: str, timeout: float = 2.0) -> bool:
    """HTTP 200 from a health URL, or an accepted connection for tcp://host:port."""
    if url.startswith("tcp://"):
        host, _, port = url.removeprefix("tcp://").rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
                return True
        except OSError:
            return False
    try:
        return requests.get(url, timeout=timeout).status_code == 200
    except requests.RequestException:
        return False


def tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16384))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def follow(path: str, emit: Callable[[str], None], sleep: Callable[[float], None] = time.sleep,
           until: Callable[[], bool] = lambda: False) -> None:
    """Print lines appended to `path` until interrupted (or `until()` says so)."""
    with open(path, errors="replace") as fh:
        fh.seek(0, os.SEEK_END)
        while not until():
            line = fh.readline()
            if line:
                emit(line.rstrip("\n"))
            else:
                sleep(0.25)


def spawn(argv: Sequence[str], env: Mapping[str, str], log_path: str,
          header: str) -> subprocess.Popen[bytes]:
    """Start a server in its own session/process group, output appended to `log_path`."""
    with open(log_path, "ab") as log:
        log.write(f"\n=== specctl: {header} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        log.flush()
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=dict(env), start_new_session=True)
