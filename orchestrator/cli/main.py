"""The `specctl` command line. Thin: parse, call the orchestrator, render, map errors to exits.

Commands live in setup (look and plan), inventory (models and backends here), serve (run
servers), measure (bench, tune) and traffic (what the gateway kept);
importing them registers them on the group in base.
"""

from __future__ import annotations

import errno
import signal
import sys
from types import FrameType

import click

from specctl.orchestrator import sanitise
from specctl.orchestrator.cli import (  # noqa: F401 (registers)
    gateway,
    inventory,
    measure,
    serve,
    setup,
    traffic,
    usage,
)
from specctl.orchestrator.cli.base import cli, err_console
from specctl.orchestrator.errors import ReadOnlyError, SpecctlError

# What a path the user (or a profile, or a SPECCTL_*_DIR) named can do to a command: a name too
# long, a loop of links, a file where a folder should be, a folder under /proc.
PATH_ERRORS = frozenset({errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR, errno.EISDIR,
                         errno.EEXIST, errno.ENOENT, errno.ENXIO, errno.EPERM, errno.EINVAL,
                         errno.EBUSY, errno.ETXTBSY, errno.EFBIG, errno.EMLINK})


# click >= 8.2 raises this for a group run without a command (its help, exit 2); 8.1 prints it
NO_ARGS: type[click.UsageError] | tuple[()] = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _exit_on(signum: int, _frame: FrameType | None) -> None:
    """Unwind: servers that bench/tune started are stopped on the way out. A second signal
    (`timeout`, a process manager, a user pressing on) must not cut that cleanup short and
    leave them running: from the first on, SIGTERM and SIGHUP are ignored (stopping a server
    has its own bounded grace, then SIGKILL)."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def main() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):  # the supervisor sets its own while it serves
        signal.signal(sig, _exit_on)
    try:
        cli.main(standalone_mode=False, prog_name="specctl")
    except SpecctlError as exc:  # its text holds names, paths and answers from outside
        err_console.print(f"specctl: error: {sanitise.line(exc)}", highlight=False,
                          markup=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except OSError as exc:
        if exc.errno == errno.EROFS:  # not a full disk: a service's sandbox, or a ro mount
            readonly = ReadOnlyError(exc.filename or "?")
            err_console.print(f"specctl: error: {sanitise.line(readonly)}", highlight=False,
                              markup=False, soft_wrap=True)
            sys.exit(1)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EACCES):
            err_console.print(f"specctl: error: cannot write {sanitise.line(exc.filename or '')}"
                              f": {exc.strerror}; free some space or point SPECCTL_STATE_DIR "
                              "elsewhere", highlight=False, markup=False, soft_wrap=True)
            sys.exit(1)
        if exc.errno not in PATH_ERRORS:
            raise  # anything else is a bug: keep the traceback
        err_console.print(f"specctl: error: {sanitise.line(exc.filename or 'a path')}: "
                          f"{exc.strerror}; check the path (and SPECCTL_STATE_DIR, "
                          "SPECCTL_CONFIG_DIR, SPECCTL_CACHE_DIR)", highlight=False,
                          markup=False, soft_wrap=True)
        sys.exit(1)
    except click.exceptions.Abort:
        err_console.print("specctl: aborted")
        sys.exit(130)
    except NO_ARGS as exc:  # `specctl`, `specctl service`: the help
        exc.show()
        sys.exit(exc.exit_code)
    except click.UsageError as exc:  # bad input on the command line: one line, exit 2
        err_console.print(sanitise.line(usage.one_line(exc)), highlight=False, markup=False,
                          soft_wrap=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
