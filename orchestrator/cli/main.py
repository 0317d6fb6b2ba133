"""The `specctl` command line. Thin: parse, call the orchestrator, render, map errors to exits.

Commands live in setup (look and plan), inventory (models and backends here), serve (run
servers), measure (bench, tune), gateway and traffic (what the gateway kept); importing a module
registers its commands on the group in base. A command's module is imported when the command
runs (COMMANDS), all of them for the group's help: `plan` loads none of the others.
"""

from __future__ import annotations

import errno
import importlib
import signal
import sys
from types import FrameType

import click

from specctl.orchestrator import sanitise
from specctl.orchestrator.cli import usage
from specctl.orchestrator.cli.base import cli, err_console
from specctl.orchestrator.errors import ReadOnlyError, SpecctlError

# each command -> the modules that register it (inventory adds to setup's groups);
# tests/test_cli_width.py checks that loading them all gives these commands and no others
COMMANDS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("profiles", "doctor", "plan", "drafts"), ("setup",)),
    **dict.fromkeys(("backend", "models"), ("setup", "inventory")),
    **dict.fromkeys(("bench", "tune"), ("measure",)),
    **dict.fromkeys(("up", "down", "status", "ps", "logs", "worker", "service"), ("serve",)),
    "gateway": ("gateway",), "traffic": ("traffic",),
}


def load(name: str | None) -> None:
    """Register command `name` (None: every command), importing the modules it lives in."""
    for module in sorted({*COMMANDS.get(name, ())} if name else
                         {m for ms in COMMANDS.values() for m in ms}):
        importlib.import_module(f"specctl.orchestrator.cli.{module}")


cli.loader = load

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
