"""Bad input on the command line, said in one line with what to do (README's exit code 2).

click's own report is three lines (usage, a pointer to --help, the error); specctl's is one:
`specctl: error: <what>; see `specctl CMD --help``. A misspelled choice gets "did you mean",
as an unknown option does from click, and a number out of its range says the range.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import click

RANGES = (click.IntRange, click.FloatRange)

class Choice(click.Choice):  # type: ignore[type-arg]
    """click's Choice, whose refusal names the closest choice ("did you mean launchd?")."""

    def get_invalid_choice_message(self, value: Any, ctx: click.Context | None) -> str:
        text = super().get_invalid_choice_message(value, ctx).rstrip(".")
        words = [str(c) for c in self.choices]
        close = difflib.get_close_matches(str(value), words, n=1, cutoff=0.5)
        return f"{text}; did you mean {close[0]}?" if close else text


def hinted(params: list[click.Parameter]) -> None:
    """Every plain click.Choice among `params` made a Choice that says "did you mean" (every
    command's options, wherever they were declared)."""
    for param in params:
        if type(param.type) is click.Choice:
            param.type = Choice(param.type.choices, case_sensitive=param.type.case_sensitive)


def one_line(exc: click.ClickException) -> str:
    """The error as one line with what to do: the message, and where the command's help is."""
    text = " ".join(exc.format_message().split()).rstrip(".")
    text = re.sub(r"^Invalid value(?: for (['\"]?)(.+?)\1)?: ", lambda m: f"{m[2]}: " if m[2]
                  else "", text)  # "--port: 'x' is not ..." (click: "Invalid value for '--port'")
    param = getattr(exc, "param", None)
    span = f" {_span(param.type)}" if isinstance(param, click.Parameter) and isinstance(
        param.type, RANGES) else ""
    for kind, plain in (("integer range", "whole number"), ("integer", "whole number"),
                        ("float range", "number"), ("float", "number")):
        text = text.replace(f"is not a valid {kind}", f"is not a {plain}{span}")
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if isinstance(ctx, click.Context) else "specctl"
    return f"specctl: error: {text}{'' if text.endswith('?') else ';'} see `{where} --help`"


def _span(kind: Any) -> str:
    low, high = kind.min, kind.max
    if low is not None and high is not None:
        return f"from {low} to {high}"
    return f"at least {low}" if low is not None else f"at most {high}"
