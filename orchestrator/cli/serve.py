"""Commands that run servers: up, down, status, logs, workers, services."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from specctl.orchestrator.cli.base import PROFILE, cli, console, err_console
from specctl.orchestrator.errors import BackendError, SpecctlError

if TYPE_CHECKING:
    from specctl.orchestrator.app import App, Resolved
    from specctl.orchestrator.service import units


@cli.command()
@PROFILE
@click.option("--foreground", is_flag=True,
              help="Supervise in this process until stopped (for systemd/launchd).")
@click.option("--no-provision", is_flag=True,
              help="Fail instead of installing the chosen backend or fetching test models.")
@click.option("--no-download", is_flag=True,
              help="Fail instead of pulling models that are only on the Hugging Face Hub "
                   "(also SPECCTL_NO_DOWNLOAD=1).")
@click.option("--handoff", type=click.Path(path_type=Path), hidden=True,
              help="The launch `up` resolved (internal: the detached supervisor reads it).")
def up(profile_ref: str, foreground: bool, no_provision: bool, no_download: bool,
       handoff: Path | None) -> None:
    """Launch the profile's server, wait until healthy, print the OpenAI-compatible URL.

    Without --foreground a detached supervisor keeps the server up (restarting it after a crash)
    until `specctl down`. The plan is made once, here: what is printed is what runs. Models
    that are only on the Hugging Face Hub are pulled first (size shown), unless --no-download."""
    from specctl.orchestrator import runs
    from specctl.orchestrator.app import App
    from specctl.orchestrator.runtime import handoff as handoff_mod
    from specctl.orchestrator.service import envfile

    envfile.apply(os.environ)  # a launchd service's secrets (systemd reads its file itself)
    app = App.from_env()
    if handoff is not None:  # the detached supervisor: run what the parent resolved
        sys.exit(runs.serve_foreground(app, handoff_mod.take(handoff), console.print))
    resolved = _resolve_for_up(app, profile_ref, provide=not no_provision,
                               download=not (no_download or app.settings.no_download))
    ready = runs.ready_of(app, resolved)
    if foreground:
        sys.exit(runs.serve_foreground(app, ready, console.print))
    console.print(f"starting {ready.name}: {ready.spec}", highlight=False)
    run = runs.start_detached(app, ready, console.print)
    console.print(f"[bold green]{run.profile} is up[/bold green] at {run.url}", highlight=False)
    console.print(f"speculation: {run.spec}", highlight=False)
    if run.plan.get("model"):
        console.print(f"model name for requests: {run.plan['model']}", highlight=False)
    console.print(f"logs: specctl logs {run.profile} -f    stop: specctl down {run.profile}")


def _resolve_for_up(app: App, profile_ref: str, provide: bool, download: bool) -> Resolved:
    """Load the profile once, probe once, provide only what the chosen backend needs, plan,
    then pull the plan's models that are only on the Hub."""
    from dataclasses import replace

    from specctl.orchestrator.runtime import provision

    profile = app.load(profile_ref)
    choice = app.choose(profile)
    if choice.installed.assumed:
        backend = app.backends()[choice.name]
        if not provide or not provision.installable(backend):
            raise BackendError(f"{profile.name} runs on {choice.name}, which is not installed "
                               f"here; install it with {backend.install_hint}")
        console.print(f"{choice.name} is not installed: installing it", highlight=False)
        provision.install(backend, app.dirs)
        app.reprobe(choice.name)
    if provide:
        provision.missing_models(profile, app.dirs, app.backends(), console.print)
    resolved = app.resolve(profile)
    plan = provision.remote_models(resolved.plan, app.resolver(), download, console.print)
    return replace(resolved, plan=plan)


@cli.command()
@click.argument("name", required=False)
@click.option("--all", "all_", is_flag=True, help="Stop every running profile.")
def down(name: str | None, all_: bool) -> None:
    """Stop a profile's server (the whole process group) and its supervisor."""
    from specctl.orchestrator import runs
    from specctl.orchestrator.app import App
    from specctl.orchestrator.runtime import state

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
    from specctl.orchestrator import runs
    from specctl.orchestrator.app import App
    from specctl.orchestrator.cli import render
    from specctl.orchestrator.service import observe

    app = App.from_env()
    rows = observe.annotate(runs.status(app), app.dirs)
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
    """Print a profile's server log (under systemd: the unit's journal, via journalctl)."""
    from specctl.orchestrator.config.paths import Dirs
    from specctl.orchestrator.files import inside
    from specctl.orchestrator.runtime import procs, state
    from specctl.orchestrator.service import observe

    dirs = Dirs.from_env()
    path = inside(dirs.logs, name, ".log", "profile name")
    try:
        run = state.load(dirs.runs, name)
    except SpecctlError:
        run = None
    # under systemd the log is the unit's journal: the run says so, or there is no run and
    # no log file but an installed unit
    if (run.log == procs.JOURNAL) if run is not None else not path.is_file():
        journal = observe.journal_argv(name, dirs, lines, follow)
        if journal is not None:
            sys.exit(subprocess.run(journal, check=False).returncode)
    if not path.is_file():
        raise SpecctlError(f"no log for {name} in {path.parent}; has it been started?")
    click.echo(procs.tail(str(path), lines))
    if follow:
        procs.follow(str(path), click.echo)




@cli.group()
def worker() -> None:
    """Workers: lend this machine's memory and compute to a server on another host (the
    backend's own distribution, e.g. llama.cpp RPC workers)."""


@worker.command("up")
@click.option("--port", type=click.IntRange(1, 65535), default=50052, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Workers have no authentication: bind beyond "
                   "loopback only on a trusted network.")
@click.option("--threads", type=int, help="CPU threads (default: the worker's own).")
@click.option("--foreground", is_flag=True, help="Supervise in this process (for services).")
def worker_up(port: int, host: str, threads: int | None, foreground: bool) -> None:
    """Start a worker under supervision (restarted after a crash until `worker down`)."""
    from specctl.orchestrator import runs
    from specctl.orchestrator.app import App

    app = App.from_env()
    if host not in ("127.0.0.1", "localhost", "::1"):
        err_console.print(f"specctl: warning: a worker on {host} accepts anyone who can reach "
                          "it; use it only on a trusted network")
    if foreground:
        sys.exit(runs.serve_worker(app, host, port, threads, console.print))
    args = ["worker", "up", "--port", str(port), "--host", host, "--foreground"]
    run = runs.detach(app, f"worker-{port}", args + (["--threads", str(threads)] if threads
                                                     else []))
    console.print(f"worker up at {host}:{port} ({run.plan.get('backend', '?')}); add "
                  f"\"{host}:{port}\" to a profile's workers list", highlight=False)
    console.print(f"stop: specctl worker down --port {run.port}")


@worker.command("down")
@click.option("--port", type=click.IntRange(1, 65535), default=50052, show_default=True)
def worker_down(port: int) -> None:
    """Stop the worker on PORT."""
    from specctl.orchestrator import runs
    from specctl.orchestrator.app import App

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
@click.option("--user-name", metavar="USER",
              help="With --system: the account the service runs as (default: the user who ran "
                   "sudo, else you). Never root.")
def service_install(profile_ref: str, system: bool, manager: str | None, dry_run: bool,
                    enable: bool, user_name: str | None) -> None:
    """Write a unit running `specctl up --profile NAME --foreground` (restart on failure,
    whole-group stop, hardened). API keys go in <config>/service.env, never in the unit. A
    --system service runs as a named user (User=), never as root."""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.config import profiles as profiles_mod
    from specctl.orchestrator.service import manage as service_mod
    from specctl.orchestrator.service import units

    app = App.from_env()
    profile = profiles_mod.load(profile_ref, app.dirs)
    mgr = manager or service_mod.default_manager()
    user = service_mod.service_user(user_name, os.environ) if system else None
    key_env = profile.server.api_key_env
    spec = service_mod.spec_for(profile.name, profile_ref, app.dirs, system, os.environ, user,
                                key_env, profile.backend)
    carried = service_mod.explain(spec, mgr)
    if dry_run:  # the unit on stdout (as written), what it carries and why on stderr
        click.echo(service_mod.render(spec, mgr), nl=False)
        click.echo("carries:\n  " + "\n  ".join(carried), err=True)
        return
    done = service_mod.install(spec, mgr, enable)
    if done.replaced:
        console.print(f"replaced {done.path}: " + ("\n".join(done.diff) if done.diff else
                                                   "unchanged"), highlight=False, markup=False)
    console.print(f"wrote {done.path} and {spec.env_file}", highlight=False)
    console.print("carries:\n  " + "\n  ".join(carried), highlight=False, markup=False)
    for cmd in done.ran:
        console.print(f"ran: {' '.join(cmd)}", highlight=False)
    if not enable:
        cmds = units.activation(spec, mgr, done.path, os.getuid())
        console.print("start it with: " + " && ".join(" ".join(c) for c in cmds),
                      highlight=False)
    if key_env and key_env not in spec.secrets:
        err_console.print(f"specctl: warning: ${key_env} (the profile's API key) is not set, so "
                          f"the service will not start; export it and install again",
                          highlight=False)


def _named_service(name: str, system: bool,
                   manager: str | None) -> tuple[units.ServiceSpec, str]:
    """The service of an installed profile, found by its name (no profile file needed)."""
    from specctl.orchestrator.config.paths import Dirs
    from specctl.orchestrator.files import check_name
    from specctl.orchestrator.service import manage as service_mod

    mgr = manager or service_mod.default_manager()
    check_name(name, "profile name")
    return service_mod.spec_for(name, name, Dirs.from_env(), system, {}), mgr


@service.command("uninstall")
@click.argument("name")
@SCOPE
@MANAGER
def service_uninstall(name: str, system: bool, manager: str | None) -> None:
    """Stop, disable and remove a profile's service."""
    from specctl.orchestrator.service import manage as service_mod

    spec, mgr = _named_service(name, system, manager)
    path = service_mod.uninstall(spec, mgr)
    console.print(f"removed {path}" if path else f"no {mgr} service for {name}", highlight=False)


@service.command("status")
@click.argument("name")
@SCOPE
@MANAGER
def service_status(name: str, system: bool, manager: str | None) -> None:
    """The service's state, its restarts and last exit (the manager's, the one restart layer),
    and the server's health and acceptance as `status` shows them."""
    from specctl.orchestrator import runs
    from specctl.orchestrator.app import App
    from specctl.orchestrator.cli import render
    from specctl.orchestrator.service import observe, units

    spec, mgr = _named_service(name, system, manager)
    path = units.unit_path(spec, mgr, Path.home())
    if not path.exists():
        raise SpecctlError(f"no {mgr} service installed for {name} ({path}); "
                           f"`specctl service install --profile {name}`")
    seen = observe.observe(spec, mgr)
    console.print(f"{path}\n" + (seen.summary() if seen else
                                 f"{mgr} does not know {spec.unit_name} (not loaded, or no {mgr}"
                                 " running here)"), highlight=False, markup=False)
    app = App.from_env()
    rows = [r for r in observe.annotate(runs.status(app), app.dirs) if r.profile == name]
    if rows:
        render.show_status(console, rows)
    else:
        console.print(f"server: not running (`specctl logs {name}`)", highlight=False)
