"""The leash: an engine dies with the process that started it, however that process ends.

`python -m specctl.orchestrator.runtime.leash --fd N --grace S -- ARGV...`

The owner (the `up` supervisor, the gateway, bench, tune) makes one pipe for its whole life
(`runtime/server.py`): it keeps the write end open, never writes to it and never passes it on;
each server it starts runs under this leash, which gets the read end as fd N. The leash starts
ARGV as its child, in the leash's own process group (the owner starts the leash as the leader
of a new session), and waits for one of two things:

- the child exits: the leash exits with the child's status (a child killed by signal N kills
  the leash with N again, so the owner's `Popen.returncode` reads -N as if it were the child);
- the pipe reaches end of file: the owner is gone (exited, crashed, SIGKILLed: the kernel
  closes its end however it died). The leash sends SIGTERM to the whole group, gives the child
  S seconds, then SIGKILLs the group, itself with it.

Why not PR_SET_PDEATHSIG: set through `preexec_fn` it runs Python between fork and exec, which
is unsafe in a process with threads (the gateway starts engines from worker threads), and the
signal fires when the *thread* that forked the child exits, not the process: an engine started
from a pool thread would be killed when that thread retires. It is Linux-only as well. Not set
on the leash itself either (where it would be safe to set): the leash is started from those
same threads, so it would fire at the same wrong moment, and the pipe already covers every way
the owner can die, on Linux and macOS alike.

Signals: SIGTERM, SIGINT and SIGHUP are caught and ignored here (not SIG_IGN, which the child
would inherit): they are meant for the group (`procs.stop_group` signals it), so the child gets
its own copy; forwarding one would give the child a second (llama-server takes a second
SIGINT/SIGTERM as "exit now"). Signal the group, not the leash.

Kept small on purpose (standard library only, no specctl imports): it starts in a few
milliseconds beyond the interpreter itself.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _noted(_signum: int, _frame: object) -> None:
    """Caught (so the wakeup fd hears of it), nothing else: see the module's docstring."""


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="leash", add_help=False)
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--grace", type=float, default=10.0)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.argv[:1] == ["--"]:
        args.argv = args.argv[1:]
    if not args.argv:
        parser.error("no command after --")
    return args


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError, InterruptedError):
        while os.read(fd, 512):
            pass


def _wait(child: subprocess.Popen[bytes], owner: int, wake: int) -> int | None:
    """The child's return code once it exits; None once the owner is gone."""
    while True:
        code = child.poll()
        if code is not None:
            return code
        ready, _, _ = select.select([owner, wake], [], [])
        if wake in ready:
            _drain(wake)
        if owner in ready and not os.read(owner, 64):
            return None


def _orphaned(child: subprocess.Popen[bytes], wake: int, grace: float) -> int:
    """The owner is gone: stop the whole group (SIGTERM, then SIGKILL after `grace`)."""
    group = os.getpgrp()
    with contextlib.suppress(OSError):
        os.killpg(group, signal.SIGTERM)
    end = time.monotonic() + grace
    while child.poll() is None and time.monotonic() < end:
        ready, _, _ = select.select([wake], [], [], max(0.0, min(0.1, end - time.monotonic())))
        if ready:
            _drain(wake)
    with contextlib.suppress(OSError):
        os.killpg(group, signal.SIGKILL)  # what is left of the group, and the leash
    return 128 + signal.SIGKILL  # not reached when the kill found us


def _exit_like(code: int) -> int:
    """Exit as the child did: by its signal (no core dump of the leash), else with its code."""
    if code >= 0:
        return code
    sig = -code
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with contextlib.suppress(OSError, ValueError):  # SIGKILL's and SIGSTOP's cannot be set
        signal.signal(sig, signal.SIG_DFL)
    with contextlib.suppress(OSError):
        os.kill(os.getpid(), sig)
    return 128 + sig  # a signal that does not end a process (the child stopped for good)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    for sig in (*STOPS, signal.SIGCHLD):
        signal.signal(sig, _noted)
    try:
        child = subprocess.Popen(args.argv)  # stdio inherited; fd N is not passed on
    except OSError as exc:
        print(f"specctl: cannot start {args.argv[0]}: {exc.strerror or exc}", file=sys.stderr,
              flush=True)
        return 127
    code = _wait(child, args.fd, wake_r)
    if code is None:
        return _orphaned(child, wake_r, args.grace)
    return _exit_like(code)


if __name__ == "__main__":
    sys.exit(main())
