"""The command group, shared options and consoles of the `specctl` command line.

Start-up is kept fast (`specctl --help` imports click and little else): command modules import
what they use inside their functions, and the rich consoles are made on first use.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from specctl.orchestrator.cli.wrap import Group

if TYPE_CHECKING:
    from rich.console import Console


class _LazyConsole:
    """A rich Console made on first use (importing rich costs ~0.1 s)."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def get(self) -> Console:
        if self._console is None:
            from rich.console import Console

            from specctl.orchestrator.sanitise import strip_control

            # prose wraps at words to the terminal's width (80 when piped, or $COLUMNS);
            # what rich would not wrap as wanted goes through cli/wrap.py first (a hanging
            # indent, argv as shell lines); error lines stay one line (soft_wrap)
            self._console = Console(stderr=self._stderr, emoji=False)  # ":x:" stays text
            self._console.push_render_hook(strip_control())  # no ESC from outside, ever
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)

    def __enter__(self) -> Console:  # rich's Live and Progress hold the console this way
        return self.get().__enter__()

    def __exit__(self, *exc: object) -> None:
        self.get().__exit__(*exc)


console: Any = _LazyConsole()
err_console: Any = _LazyConsole(stderr=True)

PROFILE = click.option("--profile", "-p", "profile_ref", required=True, metavar="NAME|FILE",
                       help="A profile name (`specctl profiles`) or a path to a .toml file.")
MODEL_OR_PROFILE = ("a model (hf:ORG/REPO[:QUANT], a .gguf file, a store's STORE:NAME) or a "
                    "profile (-p NAME)")


def override_flags(func: Callable[..., Any]) -> Callable[..., Any]:
    """--port, --host, --ctx, --backend, --draft: the command gets them as `flags`."""
    from specctl.orchestrator.config.adhoc import Flags

    @functools.wraps(func)
    def wrapper(*args: Any, port: int | None, host: str | None, ctx: int | None,
                backend_names: str | None, draft: str | None, **kwargs: Any) -> Any:
        backends = tuple(n.strip() for n in (backend_names or "").split(",") if n.strip())
        if backend_names is not None and not backends:  # `--backend ""`: never the default
            raise click.BadParameter("name a backend (`specctl backend list` lists them)",
                                     param_hint="'--backend'")
        flags = Flags(port=port, host=host, ctx=ctx, backend=backends, draft=draft)
        return func(*args, flags=flags, **kwargs)

    for option in reversed(OVERRIDES):
        wrapper = option(wrapper)
    return wrapper


def model_or_profile(func: Callable[..., Any]) -> Callable[..., Any]:
    """`[MODEL]` or `-p PROFILE`, the flags that override any profile, and `-- ARGS` (engine
    arguments); the command gets `ref` (one of the two, checked) and `flags`."""
    from dataclasses import replace

    @functools.wraps(func)
    def wrapper(*args: Any, words: tuple[str, ...], profile_ref: str | None,
                flags: Any, **kwargs: Any) -> Any:
        model, extra = (None, words) if profile_ref else (words[0] if words else None, words[1:])
        if bool(model) == bool(profile_ref):
            raise click.UsageError(f"name {MODEL_OR_PROFILE}" if not model else
                                   "name a model or a profile (-p), not both")
        if extra and "--" not in sys.argv:
            raise click.UsageError(f"unexpected {' '.join(extra)}: name a model or a profile "
                                   "(-p), not both; engine arguments go after `--`, e.g. "
                                   "`specctl up MODEL -- --jinja`")
        flags = replace(flags, extra=tuple(extra)) if extra else flags
        return func(*args, ref=model or profile_ref, flags=flags, **kwargs)

    command = override_flags(wrapper)
    command = click.option("--profile", "-p", "profile_ref", metavar="NAME|FILE",
                           help="A profile name (`specctl profiles`) or a .toml file.")(command)
    return click.argument("words", nargs=-1, type=click.UNPROCESSED,
                          metavar="[MODEL] [-- ENGINE-ARGS...]")(command)


def address(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A --host value: an IP address or a host name (a bad one is a usage error, exit 2)."""
    from specctl.orchestrator.contract.launch import host_problem

    problem = host_problem(value) if value is not None else None
    if problem:
        raise click.BadParameter(problem)
    return value


OVERRIDES = [
    click.option("--port", type=click.IntRange(1, 65535), help="Serve on this port."),
    click.option("--host", metavar="ADDRESS", help="Bind this address (beyond 127.0.0.1 needs "
                 "an API key: the profile's server.api_key_env)."),
    click.option("--ctx", type=click.IntRange(256, 1 << 24), metavar="TOKENS",
                 help="Context size: at most what the model was trained for; shrunk to fit "
                      "memory when it does not (said on the plan's note line)."),
    click.option("--backend", "backend_names", metavar="NAME[,NAME]",
                 help="Backend(s) in preference order (`specctl backend list`)."),
    click.option("--draft", metavar="REF|auto|ngram|none",
                 help="The draft: a model reference, auto, ngram or none."),
]

HARDWARE = click.option("--hardware", type=click.Path(exists=True, dir_okay=False,
                                                      path_type=Path), metavar="FILE.json",
                        help="Plan for a recorded machine instead of this one "
                             "(written by `specctl doctor --record`).")


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="specctl", prog_name="specctl")
def cli() -> None:
    """Speculative decoding for local LLM serving, tuned for this machine.

    \b
    specctl doctor                  what is here and what would run
    specctl plan -p cpu-demo        the resolved plan: backend, draft, k, memory, argv, why
    specctl up hf:ORG/REPO[:QUANT]  run a Hub model with an automatic draft, print the URL
    specctl up -p cpu-demo          launch a profile, wait until healthy, print the URL
    specctl status | logs | down
    """
    import os

    if any(v.upper().startswith("SPECCTL_") for v in os.environ):  # else nothing to check
        from specctl.orchestrator.config import profiles, variables

        variables.check(os.environ, profiles.profile_model())


def seconds(text: str, option: str, low: float, high: float) -> float:
    """A duration as the command line takes it: '90s', '4m', '1h' or a number of seconds,
    from `low` to `high` seconds (a bad one is click's usage error, exit 2)."""
    units = {"s": 1, "m": 60, "h": 3600}
    body, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
    try:  # ASCII only: float() also reads other scripts' digits ('٣' is 3)
        value = float(body) * unit if body.isascii() else -1.0
    except ValueError:
        value = -1.0
    if not low <= value <= high:
        raise click.BadParameter(f"{option} takes a duration from {_span(low)} to "
                                 f"{_span(high)} (e.g. 90s, 4m, 15m), not {text!r}")
    return value


def _span(value: float) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if value >= size and value % size == 0:
            return f"{value / size:g}{unit}"
    return f"{value:g}s"
