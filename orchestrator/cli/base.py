"""The command group, shared options and consoles of the `specctl` command line."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from specctl import __version__

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

PROFILE = click.option("--profile", "-p", "profile_ref", required=True, metavar="NAME|FILE",
                       help="A profile name (`specctl profiles`) or a path to a .toml file.")
HARDWARE = click.option("--hardware", type=click.Path(path_type=Path), metavar="FILE.json",
                        help="Plan for a recorded machine instead of this one "
                             "(written by `specctl doctor --record`).")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specctl")
def cli() -> None:
    """Speculative decoding for local LLM serving, tuned for this machine.

    \b
    specctl doctor                  what is here and what would run
    specctl plan -p cpu-demo        the resolved plan: backend, draft, k, memory, argv, why
    specctl up -p cpu-demo          launch, wait until healthy, print the URL
    specctl status | logs | down
    """
