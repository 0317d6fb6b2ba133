"""The command group, shared options and consoles of the `specctl` command line.

Start-up is kept fast (`specctl --help` imports click and little else): command modules import
what they use inside their functions, and the rich consoles are made on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

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

            self._console = Console(stderr=self._stderr, soft_wrap=True)
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
HARDWARE = click.option("--hardware", type=click.Path(path_type=Path), metavar="FILE.json",
                        help="Plan for a recorded machine instead of this one "
                             "(written by `specctl doctor --record`).")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="specctl", prog_name="specctl")
def cli() -> None:
    """Speculative decoding for local LLM serving, tuned for this machine.

    \b
    specctl doctor                  what is here and what would run
    specctl plan -p cpu-demo        the resolved plan: backend, draft, k, memory, argv, why
    specctl up -p cpu-demo          launch, wait until healthy, print the URL
    specctl status | logs | down
    """
