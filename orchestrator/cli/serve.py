"""Commands that run servers: up, down, status, logs, workers, services."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from specctl.orchestrator import sanitise
from specctl.orchestrator.cli import wrap
from specctl.orchestrator.cli.base import (
    address,
    cli,
    console,
    err_console,
    model_or_profile,
)
from specctl.orchestrator.errors import SpecctlError

if TYPE_CHECKING:
    from specctl.orchestrator.app import App
    from specctl.orchestrator.config.adhoc import Flags
    from specctl.orchestrator.gateway.owned import Gateway
    from specctl.orchestrator.service import units


@cli.command()
@model_or_profile
@click.option("--foreground", is_flag=True,
              help="Supervise in this process until stopped (for systemd/launchd).")
@click.option("--no-provision", is_flag=True,
              help="Fail instead of installing the chosen backend or fetching test models.")
@click.option("--no-download", is_flag=True,
              help="Fail instead of pulling models that are only on the Hugging Face Hub "
                   "(also SPECCTL_NO_DOWNLOAD=1).")
@click.option("--yes", "-y", is_flag=True,
              help="Do not ask before a build or a download (runs without a terminal never ask).")
@click.option("--handoff", type=click.Path(path_type=Path), hidden=True,
              help="The launch `up` resolved (internal: the detached supervisor reads it).")
def up(ref: str, flags: Flags, foreground: bool, no_provision: bool, no_download: bool,
       yes: bool, handoff: Path | None) -> None:
    """Serve a model (no profile needed) or a profile; wait until healthy; print the URL.

    \b
    specctl up hf:Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M   a Hub model, draft and k auto
    specctl up ./model.gguf --port 9000 --ctx 4096
    specctl up -p cpu-demo                                       a profile (`specctl profiles`)

    The plan is made and checked first (the model, memory, the draft, API key and Hub token), then
    `up` says what it must build or download and how large, asks in a terminal (--yes skips),
    and does it. Without --foreground a detached supervisor keeps the server up (restarting it
    after a crash) until `specctl down`. The URL goes to stdout, progress to stderr."""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.commands import up as command
    from specctl.orchestrator.service import envfile

    envfile.apply(os.environ)  # a launchd service's secrets (systemd reads its file itself)
    app = App.from_env(say=_say)
    if handoff is not None:  # the detached supervisor: run what the parent resolved
        sys.exit(command.supervise(app, handoff, console.print).code)

    def ask() -> bool:
        if yes or not (sys.stdin.isatty() and sys.stderr.isatty()):
            return True
        return click.confirm("go ahead?", default=True, err=True)

    request = command.UpRequest(ref, flags, foreground, provide=not no_provision,
                              download=not (no_download or app.settings.no_download))
    done = command.up(app, request, ask, _say)
    if isinstance(done, command.Declined):
        raise click.Abort
    if isinstance(done, command.Exited):
        sys.exit(done.code)
    run = done.run
    err_console.print(f"[bold green]{run.profile} is up[/bold green], speculation: {run.spec}",
                      highlight=False)
    why = [r for r in done.plan.reasons if r.startswith("Speculation")]
    if why:  # where the setting comes from: tuned, untuned (the cost model), or why not served
        err_console.print(sanitise.line(why[-1]), highlight=False, markup=False)
    for note in done.plan.notices:  # what the plan changed of what was asked
        err_console.print(f"note: {sanitise.line(note)}", highlight=False, markup=False)
    if done.model:
        err_console.print(f"model name for requests: {done.model}", highlight=False)
    err_console.print(f"logs: specctl logs {run.profile} -f    stop: specctl down {run.profile}",
                      highlight=False)
    click.echo(run.url)


def _say(line: str) -> None:
    """Progress on stderr, as plain text."""
    err_console.print(line, highlight=False, markup=False)


@cli.command()
@click.argument("name", required=False)
@click.option("--all", "all_", is_flag=True, help="Stop every running profile.")
def down(name: str | None, all_: bool) -> None:
    """Stop a profile's server (the whole process group) and its supervisor. A name that
    never ran here and names no profile is refused (exit 2) with the closest names.

    \b
    specctl down cpu-demo
    specctl down --all"""
    from specctl.orchestrator import runs
    from specctl.orchestrator.app import App
    from specctl.orchestrator.runtime import state

    app = App.from_env()
    if not all_ and not name:
        raise click.UsageError("name a profile, or pass --all")
    if name and not all_:
        app.check_run_name(name)  # a typo is said, not "was not running"
    names = state.all_profiles(app.dirs.runs) if all_ else [name or ""]
    if not names:
        err_console.print("nothing running")
        return
    for profile in names:
        stopped = runs.down(app, profile)
        console.print(f"{profile}: {'stopped' if stopped else 'was not running'}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print as JSON (stdout).")
def status(as_json: bool) -> None:
    """Running profiles: URL, uptime, restarts and the live draft acceptance rate (`ps` too).

    \b
    specctl status
    specctl status --json | jq '.[].url'"""
    from specctl.orchestrator import runs
    from specctl.orchestrator.app import App
    from specctl.orchestrator.cli import render

    app = App.from_env()
    rows = runs.annotate(runs.status(app), app.dirs)
    if as_json:
        click.echo(json.dumps([render.status_json(r) for r in rows], indent=2))
        return
    gateways = _gateways(app)
    if not rows and not gateways:
        err_console.print("nothing running (`specctl up MODEL` or `specctl up -p NAME`)")
        return
    if rows:
        render.show_status(console, rows)
    for gateway in gateways:
        render.show_gateway_routes(console, gateway)


def _gateways(app: App) -> list[Gateway]:
    """The gateways running on this state dir, from their state files (gateway/owned.py); a
    file whose gateway is gone is left for the next gateway to reap."""
    from specctl.orchestrator.gateway import owned

    def note(line: str) -> None:
        err_console.print(f"specctl: {line}", highlight=False, markup=False)

    return owned.running(app.dirs.state, note)


cli.add_command(status, "ps")


@cli.command()
@click.argument("name")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("-n", "--lines", default=50, show_default=True, type=click.IntRange(min=0),
              help="Lines to show first (0: none).")
def logs(name: str, follow: bool, lines: int) -> None:
    """Print a profile's server log (under systemd: the unit's journal, via journalctl).

    \b
    specctl logs cpu-demo -f"""
    from specctl.orchestrator.contract.dirs import Dirs
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
        from specctl.orchestrator.app import App

        App.from_env().check_run_name(name)  # a typo: "did you mean", exit 2
        raise SpecctlError(f"no log for {name} in {path.parent}; has it been started?")
    if lines:  # server output: its control characters escaped
        click.echo(sanitise.block(procs.tail(str(path), lines)))
    if follow:
        procs.follow(str(path), lambda text: click.echo(sanitise.line(text)))




@cli.group()
def worker() -> None:
    """Workers: lend this machine's memory and compute to a server on another host (the
    backend's own distribution, e.g. llama.cpp RPC workers)."""


@worker.command("up")
@click.option("--port", type=click.IntRange(1, 65535), default=50052, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, callback=address,
              help="Address to listen on. Workers have no authentication: bind beyond "
                   "loopback only on a trusted network.")
@click.option("--threads", type=int, help="CPU threads (default: the worker's own).")
@click.option("--foreground", is_flag=True, help="Supervise in this process (for services).")
def worker_up(port: int, host: str, threads: int | None, foreground: bool) -> None:
    """Start a worker under supervision (restarted after a crash until `worker down`).

    \b
    specctl worker up --port 50052"""
    from specctl.orchestrator import runs
    from specctl.orchestrator.app import App

    app = App.from_env()
    if host not in ("127.0.0.1", "localhost", "::1"):
        err_console.print(f"specctl: warning: a worker on {host} accepts anyone who can reach "
                          "it; use it only on a trusted network", highlight=False, markup=False,
                          soft_wrap=True)
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
    """Stop the worker on PORT.

    \b
    specctl worker down --port 50052"""
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
@click.option("--profile", "-p", "profile_refs", multiple=True, metavar="NAME|FILE",
              help="The profile to run (a name or a .toml file); with --gateway, each profile "
                   "the gateway serves (repeat -p; none: every profile that runs here).")
@click.option("--gateway", "as_gateway", is_flag=True,
              help="Install `specctl gateway` (one endpoint for every profile) as the one "
                   "service instead of one profile's server.")
@click.option("--port", type=click.IntRange(1, 65535),
              help="The server's port (default: the profile's); with --gateway, the "
                   "gateway's (default: 8070).")
@click.option("--host", metavar="ADDRESS", callback=address,
              help="The address to bind (default: the profile's; with --gateway 127.0.0.1); "
                   "beyond loopback needs an API key (the profile's server.api_key_env, or "
                   "SPECCTL_GATEWAY_API_KEY for the gateway).")
@SCOPE
@MANAGER
@click.option("--dry-run", is_flag=True, help="Print the unit/plist; write nothing.")
@click.option("--enable", is_flag=True,
              help="Also run daemon-reload + enable --now (or launchctl bootstrap).")
@click.option("--user-name", metavar="USER",
              help="With --system: the account the service runs as (default: the user who ran "
                   "sudo, else you). Never root.")
def service_install(profile_refs: tuple[str, ...], as_gateway: bool, port: int | None,
                    host: str | None, system: bool, manager: str | None, dry_run: bool,
                    enable: bool, user_name: str | None) -> None:
    """Write a unit running `specctl up --profile NAME --foreground` (restart on failure,
    whole-group stop, hardened), or with --gateway one running `specctl gateway`. The profile
    is planned first: what `specctl plan` refuses is refused here, before anything is written.
    API keys go in <config>/services/NAME.env, never in the unit. A --system service runs as a
    named user (User=), never as root.

    \b
    specctl service install -p cpu-demo --dry-run
    specctl service install -p cpu-demo --port 9000     (runs `up -p cpu-demo --port 9000`)
    specctl service install --gateway -p cpu-demo -p cpu-demo-q4 --enable"""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.config.adhoc import Flags
    from specctl.orchestrator.contract.launch import is_loopback
    from specctl.orchestrator.service import manage as service_mod

    app = App.from_env()
    mgr = manager or service_mod.default_manager()
    user = service_mod.service_user(user_name, os.environ) if system else None
    if as_gateway:
        for ref in profile_refs:  # what would not run is said now, not when a request comes
            app.resolve(app.load(ref))
        gateway_host = host or "127.0.0.1"
        spec = service_mod.gateway_spec(profile_refs, gateway_host, port or 8070, app.dirs,
                                        system, os.environ, user)
        gateway_key = "SPECCTL_GATEWAY_API_KEY"
        if not is_loopback(gateway_host) and gateway_key not in spec.secrets:
            raise click.UsageError(f"a gateway on {gateway_host} needs an API key: export "
                                   f"{gateway_key}=<key> and install again")
        _install(spec, mgr, dry_run, enable, None)
        return
    if len(profile_refs) != 1:
        raise click.UsageError("name one profile with -p (or --gateway for several)")
    profile_ref, flags = profile_refs[0], Flags(port=port, host=host)
    profile = app.resolve(app.load(profile_refs[0], flags)).profile  # refused as `plan` does
    key_env = profile.server.api_key_env
    spec = service_mod.spec_for(profile.name, profile_ref, app.dirs, system, os.environ, user,
                                key_env, profile.backend, flags.argv())
    _install(spec, mgr, dry_run, enable, key_env)


def _install(spec: units.ServiceSpec, mgr: str, dry_run: bool, enable: bool,
             key_env: str | None) -> None:
    """Print (--dry-run) or write the service, and say what it carries and how to start it."""
    from specctl.orchestrator.service import manage as service_mod
    from specctl.orchestrator.service import units

    carried = service_mod.explain(spec, mgr)
    if dry_run:  # the unit on stdout (as written), what it carries and why on stderr
        click.echo(service_mod.render(spec, mgr), nl=False)
        err_console.print("carries:", highlight=False, markup=False)
        for line in carried:
            wrap.say(err_console, line, "  ", "      ")
        return
    done = service_mod.install(spec, mgr, enable)
    if done.replaced:  # the diff's lines are the unit's own: they stay whole
        wrap.say(console, f"replaced {done.path}:" + ("" if done.diff else " unchanged"))
        for line in done.diff:
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    wrap.say(console, f"wrote {done.path} and {spec.env_file}")
    console.print("carries:", highlight=False, markup=False)
    for line in carried:
        wrap.say(console, line, "  ", "      ")
    for cmd in done.ran:
        wrap.run(console, cmd, "ran:")
    if not enable:
        console.print("start it with:", highlight=False, markup=False)
        for cmd in units.activation(spec, mgr, done.path, os.getuid()):
            wrap.run(console, cmd)
    if key_env and key_env not in spec.secrets:
        err_console.print(f"specctl: warning: ${key_env} (the profile's API key) is not set, so "
                          f"the service will not start; export it and install again",
                          highlight=False)


def _named_service(name: str, system: bool,
                   manager: str | None) -> tuple[units.ServiceSpec, str]:
    """The service of an installed profile, found by its name (no profile file needed)."""
    from specctl.orchestrator.contract.dirs import Dirs
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
    """Stop, disable and remove a profile's service.

    \b
    specctl service uninstall cpu-demo"""
    from specctl.orchestrator.service import manage as service_mod

    spec, mgr = _named_service(name, system, manager)
    path = service_mod.uninstall(spec, mgr)
    console.print(f"removed {path}" if path else f"no {mgr} service for {name}", highlight=False)


@service.command("status")
@click.argument("name")
@SCOPE
@MANAGER
@click.option("--json", "as_json", is_flag=True, help="Print as JSON (stdout).")
def service_status(name: str, system: bool, manager: str | None, as_json: bool) -> None:
    """The service's state, its restarts and last exit (the manager's, the one restart layer),
    and the server's health and acceptance as `status` shows them.

    \b
    specctl service status cpu-demo
    specctl service status cpu-demo --json | jq .service.restarts"""
    from dataclasses import asdict

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
    app = App.from_env()
    rows = [r for r in runs.annotate(runs.status(app), app.dirs) if r.profile == name]
    if as_json:
        click.echo(json.dumps({"profile": name, "manager": mgr, "unit": str(path),
                               "service": asdict(seen) if seen else None,
                               "server": render.status_json(rows[0]) if rows else None},
                              indent=2))
        return
    console.print(f"{path}\n" + (seen.summary() if seen else
                                 f"{mgr} does not know {spec.unit_name} (not loaded, or no {mgr}"
                                 " running here)"), highlight=False, markup=False)
    if rows:
        render.show_status(console, rows)
    else:
        console.print(f"server: not running (`specctl logs {name}`)", highlight=False)
