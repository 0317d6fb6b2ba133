"""The `specctl` command line. Thin: parse, call the orchestrator, render, map errors to exits."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from specctl import __version__
from specctl.orchestrator import profiles as profiles_mod
from specctl.orchestrator import render
from specctl.orchestrator.app import App
from specctl.orchestrator.backends import INSTALL_HINT, probe_all
from specctl.orchestrator.errors import SpecctlError

console = Console()
err_console = Console(stderr=True)

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


@cli.group(invoke_without_command=True)
@click.pass_context
def profiles(ctx: click.Context) -> None:
    """List the profiles (shipped and yours), or show one."""
    if ctx.invoked_subcommand:
        return
    app = App.from_env()
    table = Table("profile", "description", "source")
    for name, path in profiles_mod.available(app.dirs).items():
        try:
            desc = profiles_mod.load(str(path), app.dirs).description
        except SpecctlError as exc:
            desc = f"[red]invalid: {exc}[/red]"
        source = "user" if path.is_relative_to(app.dirs.profiles) else "shipped"
        table.add_row(name, desc, source)
    console.print(table)


@profiles.command("show")
@click.argument("name")
def profiles_show(name: str) -> None:
    """Print a profile as TOML (the file) and as validated with defaults (JSON)."""
    app = App.from_env()
    profile = profiles_mod.load(name, app.dirs)
    path = Path(name) if name.endswith(".toml") else profiles_mod.available(app.dirs)[name]
    console.print(f"# {path}", highlight=False)
    console.print(path.read_text(), highlight=False, markup=False)
    console.print("# resolved, with defaults and SPECCTL_* overrides")
    console.print_json(profile.model_dump_json())


@cli.command()
@HARDWARE
@click.option("--record", type=click.Path(path_type=Path), metavar="FILE.json",
              help="Write this machine's hardware to FILE for planning elsewhere.")
def doctor(hardware: Path | None, record: Path | None) -> None:
    """Show this machine, the backends found, and what would run."""
    app = App.from_env()
    hw = app.hardware(hardware)
    render.show_hardware(console, hw)
    if record:
        record.write_text(json.dumps(hw.to_json(), indent=2) + "\n")
        console.print(f"recorded to {record}")
    console.print()
    for name, found in probe_all(app.backends()).items():
        line = found.describe() if found else f"not found ({INSTALL_HINT[name]})"
        console.print(f"[bold]{name:9}[/bold] {line}", highlight=False)


@cli.command()
@PROFILE
@HARDWARE
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan(profile_ref: str, hardware: Path | None, as_json: bool) -> None:
    """Resolve the launch plan for a profile without launching anything."""
    resolved = App.from_env().resolve(profile_ref, hardware)
    launch = resolved.launch()
    if as_json:
        click.echo(json.dumps(render.plan_json(resolved.plan, resolved.installed, launch),
                              indent=2))
    else:
        render.show_plan(console, resolved.plan, resolved.installed, launch)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except SpecctlError as exc:
        err_console.print(f"specctl: error: {exc}", highlight=False, markup=False,
                          soft_wrap=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        err_console.print("specctl: aborted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
