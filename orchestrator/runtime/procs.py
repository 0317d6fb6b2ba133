"""Process groups: find, signal and reap every process of a server's group, and free ports.

A pid or process group read from a state file may belong to someone else by now (the run ended,
the machine rebooted, the pid was reused): `ours` checks the recorded identity (create time and
command line) first, and nothing recorded is signalled without it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import time
from collections.abc import Callable, Mapping, Sequence

import psutil
from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from specctl.orchestrator import http
from specctl.orchestrator.errors import ServerError

TOLERANCE_S = 1.0  # create times are recorded to the clock tick
JOURNAL = "journal"  # a run's log when its output goes to systemd's journal


def journal_connected(environ: Mapping[str, str] | None = None, fd: int = 1) -> bool:
    """Is `fd` systemd's journal? systemd says so in $JOURNAL_STREAM (device:inode of the
    stream it connected), checked against the fd itself."""
    stream = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return stream == f"{st.st_dev}:{st.st_ino}"


def rotate(path: str, max_bytes: int, backups: int) -> bool:
    """Cap a log a server appends to (O_APPEND): past `max_bytes`, copy it to PATH.1 (older
    ones shifted up to PATH.<backups>) and truncate it in place, so the server's open file
    keeps working (logrotate's copytruncate). True if it rotated."""
    try:
        if os.stat(path).st_size <= max_bytes:
            return False
        for n in range(backups - 1, 0, -1):
            if os.path.exists(f"{path}.{n}"):
                os.replace(f"{path}.{n}", f"{path}.{n + 1}")
        if backups > 0:
            shutil.copyfile(path, f"{path}.1")
        os.truncate(path, 0)
    except OSError:
        return False
    return True


def identity(pid: int) -> tuple[float, list[str]] | None:
    """(create time, command line) of a process, to record; None when it cannot be read."""
    try:
        proc = psutil.Process(pid)
        return proc.create_time(), proc.cmdline()
    except psutil.Error:
        return None


def ours(pid: int | None, started: float | None,
         cmdline: Sequence[str] = ()) -> psutil.Process | None:
    """The live process `pid` if it is still the one recorded: the same create time, the same
    (non-empty) command line, run by this user. None otherwise (gone, a zombie, or another
    process that now has the pid): a pid, create time and empty command line can be read from
    /proc by anyone, so they prove nothing. psutil's own signals re-check pid and create time."""
    if not pid or started is None or not cmdline:
        return None
    try:
        proc = psutil.Process(pid)
        same = abs(proc.create_time() - started) <= TOLERANCE_S and \
            proc.cmdline() == list(cmdline) and _same_user(proc)
        return proc if same and proc.status() != psutil.STATUS_ZOMBIE else None
    except psutil.Error:
        return None


def _same_user(proc: psutil.Process) -> bool:
    if not hasattr(os, "geteuid"):
        return True
    return os.geteuid() in (proc.uids().real, proc.uids().effective)


def stop_recorded_group(pgid: int | None, leader: psutil.Process | None,
                        grace: float = 10.0) -> bool:
    """Stop a process group read from a state file, only if `leader` (checked by `ours`) is
    still its leader: after a reboot or pid reuse the number may be someone else's group."""
    if not pgid or leader is None or leader.pid != pgid:
        return False
    try:
        if os.getpgid(leader.pid) != pgid:
            return False
    except ProcessLookupError:
        return False
    return stop_group(pgid, grace)


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
    SIGCONT follows the SIGTERM: a stopped (hung, SIGSTOPped) member acts on it now.

    vLLM's EngineCore and workers outlive a killed API server, so the group, not the parent."""
    if not group_members(pgid):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
        os.killpg(pgid, signal.SIGCONT)
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


PORT_FIX = "pick another port (server.port in the profile, or SPECCTL_SERVER__PORT)"


def ensure_port_free(host: str, port: int, fix: str = PORT_FIX) -> None:
    """Fail in one line when `host:port` cannot be bound; `fix` says how to pick another (the
    caller's own flag or setting)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise ServerError(
                    f"port {port} on {host} is in use{port_owner(port)}; stop that server or "
                    f"{fix}"
                ) from None
            raise ServerError(f"cannot bind {host}:{port}: {exc.strerror}") from None


def health(url: str, timeout: float = 2.0) -> int | None:
    """The HTTP status of a health URL (200 for an accepted connection to tcp://host:port);
    None while nothing answers."""
    if url.startswith("tcp://"):
        host, _, port = url.removeprefix("tcp://").rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
                return 200
        except OSError:
            return None
    try:
        return http.get(url, timeout=timeout).status_code
    except http.Unreachable:
        return None


def healthy(url: str, timeout: float = 2.0) -> bool:
    """HTTP 200 from a health URL, or an accepted connection for tcp://host:port."""
    return health(url, timeout) == 200


def tail(path: str, lines: int = 15, skip: str = "") -> str:
    """The last lines of a log; lines containing `skip` (a health check's access log, which
    would bury the cause) left out."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 65536))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return "(no log)"
    kept = [ln for ln in text.splitlines() if not skip or skip not in ln]
    return "\n".join(kept[-lines:]) if lines > 0 else ""


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
                if os.fstat(fh.fileno()).st_size < fh.tell():
                    fh.seek(0)  # rotated (copied away and truncated): read it from the start
                sleep(0.25)

