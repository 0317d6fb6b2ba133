"""Every command and subcommand, walked from click's command tree (a new command is covered by
itself), given a bad value of each kind of option it has: an unknown option, a number option
given `x`, a choice given a misspelling, a file option given a file that is not there (or, for
a file to write, a folder that is not there). Each must answer in one line on stderr, exit 2
(README: bad input), say what to do (did you mean, or where the help is), and do it quickly."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import click
import pytest

from specctl.orchestrator.cli import main as _registers
from specctl.orchestrator.cli.base import cli as root
from tests.cli import run_main, specctl

_registers.load(None)  # every command registered (the command line loads one as it runs)

MISSING = "/nonexistent-specctl-folder/missing.json"
CEILING_S = 2.0  # generous for a shared machine; the report gives the real figures


def commands(group: click.Command = root,
             path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command of the tree, groups included (their own options count too)."""
    yield path, group
    if isinstance(group, click.Group):
        for name, sub in sorted(group.commands.items()):
            yield from commands(sub, (*path, name))


@dataclass(frozen=True)
class Case:
    path: tuple[str, ...]
    kind: str
    args: tuple[str, ...]

    @property
    def id(self) -> str:
        return " ".join([*self.path, *self.args])


def _required(command: click.Command) -> list[str]:
    """Values for what the command requires (a profile, a name), for checks made in its body."""
    out: list[str] = []
    for p in command.params:
        if p.required and isinstance(p, click.Option):
            out += [p.opts[0], "cpu-demo"]
        elif p.required and isinstance(p, click.Argument):
            out.append("cpu-demo")
    return out


def cases() -> list[Case]:
    found = []
    for path, command in commands():
        found.append(Case(path, "unknown option", ("--no-such-option",)))
        for p in command.params:
            if not isinstance(p, click.Option) or p.hidden or p.is_flag or p.count:
                continue
            flag, kind = p.opts[0], p.type
            if isinstance(kind, (click.types.IntParamType, click.types.FloatParamType)):
                found.append(Case(path, "number", (flag, "x")))
            elif isinstance(kind, click.Choice):
                found.append(Case(path, "choice", (flag, f"{kind.choices[0]}z")))
            elif isinstance(kind, click.Path) and kind.exists:
                found.append(Case(path, "missing file", (flag, MISSING)))
            elif isinstance(kind, click.Path):  # a file to write: its folder is not there
                found.append(Case(path, "missing folder", (flag, MISSING, *_required(command))))
    return found


CASES = cases()


def hint(line: str) -> bool:
    """What to do: "did you mean", where the help is, or specctl's "what; what to do"."""
    todo = line.partition("; ")[2]
    return "did you mean" in line.lower() or "--help`" in line or len(todo.split()) >= 2


def test_the_walk_covers_every_kind() -> None:
    kinds = {c.kind for c in CASES}
    assert kinds == {"unknown option", "number", "choice", "missing file", "missing folder"}
    assert len({c.path for c in CASES}) >= 30  # every command and group: the tree was walked


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_is_one_line_exit_2_with_a_hint(case: Case, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    began = time.monotonic()
    code, out, err = run_main(monkeypatch, capsys, *case.path, *case.args)
    took = time.monotonic() - began
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith("specctl: error: "), err
    assert hint(lines[0]), lines[0]
    assert out == ""
    assert took < CEILING_S, f"{case.id}: {took:.2f} s"


@pytest.mark.parametrize("path", sorted({c.path for c in CASES if len(c.path) == 1}),
                         ids=" ".join)
def test_bad_input_in_a_real_process(path: tuple[str, ...]) -> None:
    """The same in a real `specctl` process, start-up included: one line, exit 2, in time."""
    began = time.monotonic()
    done = specctl(*path, "--no-such-option", timeout=30)
    took = time.monotonic() - began
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert took < CEILING_S, f"{' '.join(path)}: {took:.2f} s"


@pytest.mark.parametrize("path", [(), ("service",), ("models",)], ids=" ".join)
def test_a_group_without_a_command_prints_its_help(path: tuple[str, ...],
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Not a one-line error: the help itself, as click gives it."""
    _, out, err = run_main(monkeypatch, capsys, *path)
    text = out + err
    assert text.startswith(f"Usage: specctl {' '.join(path)}".rstrip()) and "Commands:" in text
    assert "specctl: error" not in text
