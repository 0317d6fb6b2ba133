"""Commands that look and plan: profiles, doctor, plan, drafts, backend and model setup."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from specctl.orchestrator.app import App
from specctl.orchestrator.cli import render
from specctl.orchestrator.cli.base import HARDWARE, PROFILE, cli, console
from specctl.orchestrator.config import profiles as profiles_mod
from specctl.orchestrator.errors import SpecctlError
from specctl.orchestrator.machine import cluster
from specctl.orchestrator.models import testbed
from specctl.orchestrator.planning.backends import INSTALL_HINT
from specctl.orchestrator.runtime import provision


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
@click.option("--ray", "ray_address", metavar="ADDRESS",
              help="Also report the Ray cluster at ADDRESS (host:port or auto): nodes and GPUs.")
@click.option("--record", type=click.Path(path_type=Path), metavar="FILE.json",
              help="Write this machine's hardware to FILE for planning elsewhere.")
def doctor(hardware: Path | None, ray_address: str | None, record: Path | None) -> None:
    """Show this machine, the backends found, and what would run."""
    app = App.from_env()
    hw = app.hardware(hardware)
    render.show_hardware(console, hw)
    if record:
        record.write_text(json.dumps(hw.to_json(), indent=2) + "\n")
        console.print(f"recorded to {record}")
    console.print()
    probed = app.probe(app.backends())
    for name, found in probed.items():
        line = found.describe() if found else f"not found ({INSTALL_HINT[name]})"
        console.print(f"[bold]{name:9}[/bold] {escape(line)}", highlight=False)
    if probed.get("ollama") and probed.get("llamacpp"):
        console.print("tip: llama.cpp can serve your Ollama models with a draft, the fastest path "
                      "here: target = \"ollama:NAME\", backend = [\"llamacpp\"] (`specctl drafts "
                      "--target ollama:NAME` finds the draft)", highlight=False, markup=False)
    if ray_address:
        _show_ray(ray_address)
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


def _show_ray(address: str) -> None:
    nodes = cluster.ray_nodes(address, sys.executable)
    gpus = sum(n.gpus for n in nodes)
    console.print(f"\n[bold]ray[/bold]      {address}: {len(nodes)} node(s), {gpus} GPU(s)",
                  highlight=False)
    for n in nodes:
        console.print(f"  {n.address:15} {n.gpus} GPU(s), {n.cpus} CPU(s), "
                      f"{n.memory_gb:.1f} GB", highlight=False)


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
