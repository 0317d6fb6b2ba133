"""Commands that run servers: up, down, status, logs, RPC workers, services."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click

from specctl.orchestrator.app import App
from specctl.orchestrator.cli import render
from specctl.orchestrator.cli.base import PROFILE, cli, console, err_console
from specctl.orchestrator.config import profiles as profiles_mod
from specctl.orchestrator.errors import SpecctlError
from specctl.orchestrator.runtime import procs, provision, runs, state
from specctl.orchestrator.service import manage as service_mod
from specctl.orchestrator.service import units


@cli.command()
@PROFILE
@click.option("--foreground", is_flag=True,
              help="Supervise in this process until stopped (for systemd/launchd).")
@click.option("--no-provision", is_flag=True,
              help="Fail instead of building llama.cpp or fetching test models.")
def up(profile_ref: str, foreground: bool, no_provision: bool) -> None:
    """Launch the profile's server, wait until healthy, print the OpenAI-compatible URL.

    Without --foreground a detached supervisor keeps the server up (restarting it after a crash)
    until `specctl down`."""
    app = App.from_env()
    if not no_provision and not foreground:
        profile = profiles_mod.load(profile_ref, app.dirs)
        needs = not profile.backend or "llamacpp" in profile.backend
        provision.for_profile(profile, app.dirs, needs, console.print)
    resolved = app.resolve(profile_ref)
    if foreground:
        sys.exit(runs.serve_foreground(app, resolved, console.print))
    console.print(f"starting {resolved.plan.profile}: {resolved.plan.describe_spec()}",
                  highlight=False)
    run = runs.start_detached(app, resolved, profile_ref, console.print)
    console.print(f"[bold green]{run.profile} is up[/bold green] at {run.url}", highlight=False)
    console.print(f"speculation: {run.spec}", highlight=False)
    if run.plan.get("model"):
        console.print(f"model name for requests: {run.plan['model']}", highlight=False)
    console.print(f"logs: specctl logs {run.profile} -f    stop: specctl down {run.profile}")


@cli.command()
@click.argument("name", required=False)
@click.option("--all", "all_", is_flag=True, help="Stop every running profile.")
def down(name: str | None, all_: bool) -> None:
    """Stop a profile's server (the whole process group) and its supervisor."""
    app = App.from_env()
    names = state.all_profiles(app.dirs.runs) if all_ else [name] if name else []
    if not names:
        raise click.UsageError("name a profile, or pass --all")
    for profile in names:
        stopped = runs.down(app, profile)
        console.print(f"{profile}: {'stopped' if stopped else 'was not running'}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def status(as_json: bool) -> None:
    """Running profiles: URL, uptime, restarts and the live draft acceptance rate."""
    rows = runs.status(App.from_env())
    if as_json:
        click.echo(json.dumps([render.status_json(r) for r in rows], indent=2))
        return
    if not rows:
        console.print("nothing running (`specctl up --profile NAME`)")
        return
    render.show_status(console, rows)


@cli.command()
@click.argument("name")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("-n", "--lines", default=50, show_default=True, help="Lines to show first.")
def logs(name: str, follow: bool, lines: int) -> None:
    """Print a profile's server log."""
    path = App.from_env().dirs.logs / f"{name}.log"
    if not path.is_file():
        raise SpecctlError(f"no log for {name} in {path.parent}; has it been started?")
    click.echo(procs.tail(str(path), lines))
    if follow:
        procs.follow(str(path), click.echo)




@cli.group()
def worker() -> None:
    """llama.cpp RPC workers: lend this machine's memory to a llama-server on another host."""


@worker.command("up")
@click.option("--port", type=click.IntRange(1, 65535), default=50052, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. rpc-server has no authentication: bind beyond "
                   "loopback only on a trusted network.")
@click.option("--threads", type=int, help="CPU threads (default: rpc-server's).")
@click.option("--foreground", is_flag=True, help="Supervise in this process (for services).")
def worker_up(port: int, host: str, threads: int | None, foreground: bool) -> None:
    """Start `rpc-server` under supervision (restarted after a crash until `worker down`)."""
    app = App.from_env()
    if host not in ("127.0.0.1", "localhost", "::1"):
        err_console.print(f"specctl: warning: rpc-server on {host} accepts anyone who can reach "
                          "it; use it only on a trusted network")
    if foreground:
        sys.exit(runs.serve_worker(app, host, port, threads, console.print))
    args = ["worker", "up", "--port", str(port), "--host", host, "--foreground"]
    run = runs.detach(app, f"worker-{port}", args + (["--threads", str(threads)] if threads
                                                     else []))
    console.print(f"RPC worker up at {host}:{port}; add \"{host}:{port}\" to a profile's "
                  "cluster.rpc_workers", highlight=False)
    console.print(f"stop: specctl worker down --port {run.port}")


@worker.command("down")
@click.option("--port", type=click.IntRange(1, 65535), default=50052, show_default=True)
def worker_down(port: int) -> None:
    """Stop the RPC worker on PORT."""
    stopped = runs.down(App.from_env(), f"worker-{port}")
    console.print(f"worker-{port}: {'stopped' if stopped else 'was not running'}")


@cli.group()
def service() -> None:
    """Run a profile as a service: systemd (Linux) or launchd (macOS)."""


MANAGER = click.option("--manager", type=click.Choice(["systemd", "launchd"]),
                       help="Service manager (default: this platform's).")
SCOPE = click.option("--system/--user", "system", default=False,
                     help="A system service (root) or the user's own (default).")


@service.command("install")
@PROFILE
@SCOPE
@MANAGER
@click.option("--dry-run", is_flag=True, help="Print the unit/plist; write nothing.")
@click.option("--enable", is_flag=True,
              help="Also run daemon-reload + enable --now (or launchctl bootstrap).")
def service_install(profile_ref: str, system: bool, manager: str | None, dry_run: bool,
                    enable: bool) -> None:
    """Write a unit running `specctl up --profile NAME --foreground` (restart on failure,
    whole-group stop, hardened). API keys go in <config>/service.env, never in the unit."""
    app = App.from_env()
    profile = profiles_mod.load(profile_ref, app.dirs)
    mgr = manager or service_mod.default_manager()
    spec = service_mod.spec_for(profile.name, profile_ref, app.dirs, system, dict(os.environ))
    if dry_run:
        click.echo(service_mod.render(spec, mgr), nl=False)
        return
    done = service_mod.install(spec, mgr, enable)
    console.print(f"wrote {done.path}", highlight=False)
    for cmd in done.ran:
        console.print(f"ran: {' '.join(cmd)}", highlight=False)
    if not enable:
        cmds = units.activation(spec, mgr, done.path, os.getuid())
        console.print("start it with: " + " && ".join(" ".join(c) for c in cmds),
                      highlight=False)
    if profile.server.api_key_env:
        console.print(f"put {profile.server.api_key_env}=... in {spec.env_file} (mode 600)",
                      highlight=False)


def _named_service(name: str, system: bool,
                   manager: str | None) -> tuple[units.ServiceSpec, str]:
    """The service of an installed profile, found by its name (no profile file needed)."""
    mgr = manager or service_mod.default_manager()
    return service_mod.spec_for(name, name, App.from_env().dirs, system, dict(os.environ)), mgr


@service.command("uninstall")
@click.argument("name")
@SCOPE
@MANAGER
def service_uninstall(name: str, system: bool, manager: str | None) -> None:
    """Stop, disable and remove a profile's service."""
    spec, mgr = _named_service(name, system, manager)
    path = service_mod.uninstall(spec, mgr)
    console.print(f"removed {path}" if path else f"no {mgr} service for {name}", highlight=False)


@service.command("status")
@click.argument("name")
@SCOPE
@MANAGER
def service_status(name: str, system: bool, manager: str | None) -> None:
    """Show the service manager's view of a profile's service."""
    spec, mgr = _named_service(name, system, manager)
    path = units.unit_path(spec, mgr, Path.home())
    if not path.exists():
        raise SpecctlError(f"no {mgr} service installed for {name} ({path}); "
                           f"`specctl service install --profile {name}`")
    cmd = units.status_command(spec, mgr, os.getuid())
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    click.echo(f"{path}\n{done.stdout or done.stderr}")
