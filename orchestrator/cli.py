"""The `specctl` command line. Thin: parse, call the orchestrator, render, map errors to exits."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specctl import __version__
from specctl.orchestrator import bench as bench_mod
from specctl.orchestrator import (
    costmodel,
    procs,
    provision,
    render,
    reports,
    runs,
    state,
    testbed,
    units,
)
from specctl.orchestrator import profiles as profiles_mod
from specctl.orchestrator import service as service_mod
from specctl.orchestrator import tune as tune_mod
from specctl.orchestrator import tuned as tuned_mod
from specctl.orchestrator.app import App
from specctl.orchestrator.backends import INSTALL_HINT, probe_all
from specctl.orchestrator.errors import SpecctlError

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
        console.print(f"[bold]{name:9}[/bold] {escape(line)}", highlight=False)
    if hardware:
        return
    console.print("\n[bold]what would run here[/bold]")
    for name in profiles_mod.available(app.dirs):
        try:
            plan = app.resolve(name).plan
            verdict = f"{plan.backend}: {plan.describe_spec()}, {plan.memory.total_gb:.1f} GB"
        except SpecctlError as exc:
            verdict = f"no: {exc}"
        console.print(f"  {name:26} {escape(verdict)}", highlight=False)


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


@cli.group()
def backend() -> None:
    """Install and inspect serving backends."""


@backend.command("install")
@click.argument("name", type=click.Choice(["llama.cpp"]))
@click.option("--rebuild", is_flag=True, help="Build again even if a cached build exists.")
def backend_install(name: str, rebuild: bool) -> None:
    """Use an installed llama-server, or build one from source (cached; ~6-13 min on 2 cores).

    The source is the llama.cpp tree inside the llama-cpp-python sdist on PyPI. Metal on macOS,
    CUDA when nvcc and an NVIDIA GPU are present, CPU otherwise; rpc-server is built too."""
    app = App.from_env()
    found = app.backends()["llamacpp"].probe()
    if found is not None and not rebuild:
        console.print(f"using {found.describe()}", highlight=False)
        return
    bindir = provision.install_llamacpp(app.dirs, rebuild=rebuild)
    found = app.backends()["llamacpp"].probe()
    console.print(f"llama.cpp ready in {bindir}: "
                  f"{found.describe() if found else 'not runnable?'}", highlight=False)


@cli.group()
def models() -> None:
    """Models: the real test models this project serves in its tests and demos."""


@models.command("testbed")
def models_testbed() -> None:
    """Fetch the testbed GGUF models from PyPI, check their SHA-256, make the F16 target.

    Needs ~5.3 GB in the cache dir; the F16 target needs llama-quantize (from
    `specctl backend install llama.cpp`)."""
    app = App.from_env()
    paths = provision.testbed_models(app.dirs, tuple(testbed.BY_KEY), console.print)
    for key, path in paths.items():
        console.print(f"{key:14} {path}", highlight=False)


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


@cli.command()
@click.option("--target", required=True, metavar="REF",
              help="Target model: .gguf path, hf:org/repo[:quant], ollama:name[:tag], testbed:KEY.")
@click.option("--backend", "backend_name", type=click.Choice(["llamacpp", "vllm", "ollama"]),
              default="llamacpp", show_default=True, help="Whose vocabulary rule applies.")
@click.option("--models-dir", "models_dirs", multiple=True, type=click.Path(path_type=Path),
              help="Another folder of GGUF files to search (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def drafts(target: str, backend_name: str, models_dirs: tuple[Path, ...], as_json: bool) -> None:
    """Compatible draft models for a target, ranked by expected speedup, with reasons.

    Looks in specctl's cache, the Hugging Face cache, LM Studio's folder, Ollama's store,
    SPECCTL_MODELS_DIRS and --models-dir, plus the catalog of known pairs. The filter is the
    backend's real rule (llama.cpp: same vocab type and BOS/EOS, sizes within 128, same tokens
    from id 5; vLLM: identical vocabularies)."""
    app = App.from_env()
    backend_obj = app.backends()[backend_name]
    info = app.resolver().resolve(target, backend_obj.default_quant)
    ranked = app.draft_candidates(info, backend_obj, models_dirs)
    if as_json:
        click.echo(json.dumps({"target": render.model_json(info),
                               "candidates": [c.to_json() for c in ranked]}, indent=2))
    else:
        render.show_drafts(console, info.name, ranked)


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


@service.command("uninstall")
@click.argument("name")
@SCOPE
@MANAGER
def service_uninstall(name: str, system: bool, manager: str | None) -> None:
    """Stop, disable and remove a profile's service."""
    app = App.from_env()
    mgr = manager or service_mod.default_manager()
    spec = service_mod.spec_for(name, name, app.dirs, system, dict(os.environ))
    path = service_mod.uninstall(spec, mgr)
    console.print(f"removed {path}" if path else f"no {mgr} service for {name}", highlight=False)


@service.command("status")
@click.argument("name")
@SCOPE
@MANAGER
def service_status(name: str, system: bool, manager: str | None) -> None:
    """Show the service manager's view of a profile's service."""
    app = App.from_env()
    mgr = manager or service_mod.default_manager()
    spec = service_mod.spec_for(name, name, app.dirs, system, dict(os.environ))
    path = units.unit_path(spec, mgr, Path.home())
    if not path.exists():
        raise SpecctlError(f"no {mgr} service installed for {name} ({path}); "
                           f"`specctl service install --profile {name}`")
    cmd = units.status_command(spec, mgr, os.getuid())
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    click.echo(f"{path}\n{done.stdout or done.stderr}")


def _ints(text: str | None) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()] if text else []
    except ValueError:
        raise click.BadParameter(f"expected numbers like 2,4,8, got {text!r}") from None


@cli.command()
@PROFILE
@click.option("--suite", default=",".join(bench_mod.SUITES), show_default=True,
              help="Prompt categories, comma-separated.")
@click.option("--k", "ks", metavar="K,K,...", help="Draft lengths to compare (default: the "
              "plan's k).")
@click.option("--repeats", default=2, show_default=True, help="Passes over the prompts.")
@click.option("--prompts", "per_suite", default=4, show_default=True,
              help="Prompts per category (each suite has 12).")
@click.option("--max-tokens", default=96, show_default=True)
@click.option("--json", "json_out", type=click.Path(path_type=Path),
              help="Also write the report here (it is always saved under the state dir).")
@click.option("--plot", type=click.Path(path_type=Path), metavar="FILE.png",
              help="Plot tokens/s and speedup per category (needs matplotlib).")
def bench(profile_ref: str, suite: str, ks: str | None, repeats: int, per_suite: int,
          max_tokens: int, json_out: Path | None, plot: Path | None) -> None:
    """Measure the speedup over the no-draft baseline on this machine, same prompts and build.

    Baseline and speculative servers run side by side and get the same requests interleaved,
    temperature 0. Reports decode tokens/s, speedup (median of paired ratios, with a bootstrap
    95% interval), acceptance, accepted tokens per step and how many greedy outputs were
    identical to the baseline's."""
    app = App.from_env()
    resolved = app.resolve(profile_ref)
    configs = bench_mod.configs_for(resolved.plan, _ints(ks))
    prompts = {name: bench_mod.load_suite(name)[:per_suite] for name in suite.split(",") if name}
    with render.progress_bar(console, "bench") as step:
        samples = bench_mod.measure(configs, resolved.backend, resolved.installed, prompts, repeats,
                                max_tokens, app.dirs.logs, step)
    settings = {"suites": list(prompts), "prompts_per_suite": per_suite, "repeats": repeats,
                "max_tokens": max_tokens}
    result = bench_mod.report(resolved.plan, resolved.installed, configs, samples, settings)
    saved = reports.save(app.dirs.bench, resolved.plan.profile, result)
    if json_out:
        json_out.write_text(json.dumps(result, indent=2) + "\n")
    render.show_bench(console, result)
    if plot:
        reports.plot_bench(result, plot)
        console.print(f"plot: {plot}")
    console.print(f"raw samples: {saved}", highlight=False)


@cli.command()
@click.option("--profile", "-p", "profile_ref", metavar="NAME|FILE",
              help="Profile to tune (not needed with --what-if).")
@click.option("--what-if", is_flag=True, help="Only the cost model: the best k for --alpha and "
              "--cost, with v(k) = 1 (the paper's assumption).")
@click.option("--alpha", type=click.FloatRange(0, 1), help="Acceptance rate (with --what-if).")
@click.option("--cost", type=click.FloatRange(0, min_open=True),
              help="Draft/target step cost ratio c (with --what-if).")
@click.option("--max-k", default=8, show_default=True, type=click.IntRange(1, 32))
@click.option("--exhaustive", is_flag=True,
              help="Measure every k in 1..max-k (slow; for checking the tuner itself).")
@click.option("--show", is_flag=True, help="Print the saved result: predicted vs measured.")
@click.option("--max-tokens", default=64, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def tune(profile_ref: str | None, what_if: bool, alpha: float | None, cost: float | None,
         max_k: int, exhaustive: bool, show: bool, max_tokens: int, as_json: bool) -> None:
    """Choose k (and p-min, n-gram or off) for this machine; `plan` and `up` then use it.

    Measures the target alone, the draft alone and one speculative run, fits the Leviathan cost
    model (alpha, c, v(k)), measures the model's best k and its runner-up, tries n-gram and a
    p-min, and keeps the best measured - or "off" when nothing beats the baseline by 5%."""
    if what_if:
        if alpha is None or cost is None:
            raise click.UsageError("--what-if needs --alpha and --cost")
        curve = costmodel.curve(alpha, cost, max_k)
        best = costmodel.best(curve)
        data = {"alpha": alpha, "cost": cost, "best_k": best.k, "speedup": round(best.speedup, 4),
                "curve": [{"k": p.k, "tokens_per_step": round(p.tokens_per_step, 4),
                           "speedup": round(p.speedup, 4)} for p in curve]}
        if as_json:
            click.echo(json.dumps(data, indent=2))
        else:
            render.show_curve(console, data)
        return
    if not profile_ref:
        raise click.UsageError("--profile is required (or use --what-if)")
    app = App.from_env()
    resolved = app.resolve(profile_ref, use_tuned=False)
    key = app.tuned_key(resolved.plan, resolved.installed)
    if show:
        found = tuned_mod.load(app.dirs.tuned, key)
        if found is None:
            raise SpecctlError(f"no tuning result for {resolved.plan.profile} on this machine; "
                               f"run `specctl tune --profile {resolved.plan.profile}`")
        click.echo(json.dumps(found.to_json(), indent=2)) if as_json else \
            render.show_tuned(console, found)
        return
    with render.progress_bar(console, "tune") as step:
        runner = tune_mod.Bench(resolved.backend, resolved.installed,
                                tuple(tune_mod.tune_prompts()), max_tokens, app.dirs.logs, step)
        if exhaustive:
            results, base_tps, seconds = tune_mod.sweep(resolved.plan, runner,
                                                        range(1, max_k + 1))
        else:
            result = tune_mod.tune(resolved.plan, runner, max_k)
    if exhaustive:
        previous = _safe_load(app, key)
        data = render.sweep_json(results, base_tps, seconds, previous)
        click.echo(json.dumps(data, indent=2)) if as_json else render.show_sweep(console, data)
        return
    result.key = key
    path = tuned_mod.save(app.dirs.tuned, result)
    click.echo(json.dumps(result.to_json(), indent=2)) if as_json else \
        render.show_tuned(console, result)
    console.print(f"saved: {path}; `specctl plan -p {resolved.plan.profile}` now uses it",
                  highlight=False)


def _safe_load(app: App, key: str) -> tuned_mod.Result | None:
    try:
        return tuned_mod.load(app.dirs.tuned, key)
    except SpecctlError:
        return None


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except SpecctlError as exc:
        err_console.print(f"specctl: error: {exc}", highlight=False, markup=False,
                          soft_wrap=True)
        sys.exit(exc.exit_code)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
            raise  # anything else is a bug: keep the traceback
        err_console.print(f"specctl: error: cannot write {exc.filename or ''}: {exc.strerror}; "
                          "free some space or point SPECCTL_STATE_DIR elsewhere",
                          highlight=False, markup=False, soft_wrap=True)
        sys.exit(1)
    except click.exceptions.Abort:
        err_console.print("specctl: aborted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
