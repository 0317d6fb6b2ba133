"""Every line the command line writes fits the terminal's width (80 when piped, or $COLUMNS).

One way to wrap, for all of it: prose at words under a hanging indent (a word longer than the
line, a path, is broken rather than run past it); a command line as shell lines continued with
a backslash, which a shell reads back as the same arguments; and click's help, whose
preformatted lines (`\\b` blocks: examples, command lists) wrap their description under its own
column. Tables wrap themselves (cli/tables.py); error lines stay one line each.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click

from specctl.orchestrator.cli import usage

if TYPE_CHECKING:
    from rich.console import Console

_GAP = re.compile(r"\S {2,}(?=\S)")  # the gap before a preformatted line's description column
MIN_ROOM = 24  # a description column narrower than this moves under its line instead


class _Wrapper(textwrap.TextWrapper):
    """A word longer than a line starts a line of its own and is broken there, after a '/'
    where one falls in the line (a path), else at the edge."""

    def _handle_long_word(self, reversed_chunks: list[str], cur_line: list[str], cur_len: int,
                          width: int) -> None:
        if cur_line:
            return  # textwrap ends this line and comes back with the word on the next
        chunk, room = reversed_chunks[-1], max(width - cur_len, 1)
        cut = chunk.rfind("/", 0, room) + 1 or room
        cur_line.append(chunk[:cut])
        reversed_chunks[-1] = chunk[cut:]


def prose(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    """`text` in lines of at most `width` columns, the first after `first`, the others after
    `rest` (as wide as `first` unless given)."""
    rest = " " * len(first) if rest is None else rest
    wrapper = _Wrapper(max(width, len(first) + 1, len(rest) + 1), initial_indent=first,
                       subsequent_indent=rest, break_on_hyphens=False)
    return wrapper.wrap(text) or [first.rstrip()]


def say(console: Console, text: str, first: str = "", rest: str | None = None) -> None:
    """Print plain text (no markup) as `prose` lines, to the console's width."""
    for line in prose(text, console.width, first, rest):
        console.print(line, soft_wrap=True, highlight=False, markup=False)


def run(console: Console, argv: Sequence[str], first: str = "") -> None:
    """Print a command as `shell` lines: `first` on a line of its own before it."""
    if first:
        console.print(first, soft_wrap=True, highlight=False, markup=False)
    for line in shell(argv, console.width):
        console.print(line, soft_wrap=True, highlight=False, markup=False)


def shell(argv: Sequence[str], width: int, indent: str = "  ") -> list[str]:
    """`argv` as shell lines of at most `width` columns: the arguments packed onto lines that end
    in ` \\`, the next one indented. An argument longer than a line is cut into pieces, each
    quoted, every line but its last ending in a bare `\\` and the next starting at column 0: a
    shell removes the backslash-newline and joins the adjacent quoted pieces into the one
    argument, so the lines paste back as the same command."""
    lines: list[str] = []
    line = ""
    for arg in argv:
        word = shlex.quote(arg)
        sep = " " if line.strip() else ""
        if len(line) + len(sep) + len(word) + 2 <= width:  # room for a closing " \"
            line += sep + word
            continue
        if line.strip():
            lines.append(line + " \\")
            line = indent
        if len(line) + len(word) + 2 <= width:
            line += word
            continue
        pieces = _cut(arg, width - len(line) - 2, width - 2)  # room for " \" after any
        lines.append(line + pieces[0] + "\\")
        lines += [p + "\\" for p in pieces[1:-1]]
        line = pieces[-1]
    return [*lines, line] if line.strip() else lines


def _cut(arg: str, first: int, rest: int) -> list[str]:
    """`arg` in quoted pieces, the first at most `first` columns, the others `rest`."""
    pieces: list[str] = []
    start, room = 0, max(first, 3)
    while start < len(arg):
        end = start + 1
        while end < len(arg) and len(shlex.quote(arg[start:end + 1])) <= room:
            end += 1
        pieces.append(shlex.quote(arg[start:end]))
        start, room = end, max(rest, 3)
    return pieces or ["''"]


def preformatted(line: str, width: int) -> list[str]:
    """A preformatted line ('  specctl up -p NAME     what it does') in lines of at most
    `width`: the description wraps under its own column, or under the line when that column
    leaves too little room; a line with no description wraps at its spaces."""
    if len(line) <= width:
        return [line]
    lead = " " * (len(line) - len(line.lstrip()))
    gap = _GAP.search(line)
    if gap is None:
        return prose(line.strip(), width, lead, lead + "    ")
    head, text = line[:gap.start() + 1], line[gap.end():]
    column = gap.end()
    if width - column >= MIN_ROOM and len(head) < column:
        return prose(text, width, head.ljust(column), " " * column)
    return [*prose(head.strip(), width, lead, lead + "    "),
            *prose(text, width, lead + "    ")]


class HelpFormatter(click.HelpFormatter):
    """click's help, with its preformatted lines wrapped too (click keeps them as written)."""

    def write_text(self, text: str) -> None:
        start = len(self.buffer)
        super().write_text(text)
        written = "".join(self.buffer[start:])
        del self.buffer[start:]
        self.write("\n".join(out for line in written.split("\n")
                             for out in preformatted(line, self.width or 78)))


class Context(click.Context):
    formatter_class = HelpFormatter


class Command(click.Command):
    """A command whose help is wrapped and whose choices say "did you mean" (cli/usage.py)."""

    context_class = Context

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        usage.hinted(self.params)


class Group(click.Group):
    """The command group: its commands and groups format their help with HelpFormatter. A
    `loader` (cli/main.load) registers a command when it is asked for, and all of them when
    they are listed."""

    context_class = Context
    command_class = Command
    group_class = type  # subgroups are Groups too
    loader: Callable[[str | None], None] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        usage.hinted(self.params)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and self.loader is not None:
            self.loader(cmd_name)
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        if self.loader is not None:
            self.loader(None)
        return super().list_commands(ctx)
