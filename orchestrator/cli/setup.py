"""Commands that look and plan: profiles, doctor, plan, drafts, backend and model setup."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from specctl.orchestrator.cli.base import (
    HARDWARE,
    cli,
    console,
    err_console,
    model_or_profile,
    override_flags,
)
from specctl.orchestrator.errors import BadInputError, SpecctlError
from specctl.orchestrator.sizes import gib

if TYPE_CHECKING:
    from specctl.orchestrator.app import App, Resolved
    from specctl.orchestrator.commands import doctor as command
    from specctl.orchestrator.config.adhoc import Flags
    from specctl.orchestrator.machine import cluster
    from specctl.orchestrator.measure.results import certificates


@cli.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON (stdout).")
@click.pass_context
def profiles(ctx: click.Context, as_json: bool) -> None:
    """List the profiles (shipped and yours), show one, or write one for a model.

    \b
    specctl profiles                     (or `specctl profiles list`)
    specctl profiles show cpu-demo"""
    if not ctx.invoked_subcommand:
        _list_profiles(as_json)


def _list_profiles(as_json: bool) -> None:
    from specctl.orchestrator.app import App
    from specctl.orchestrator.cli import tables
    from specctl.orchestrator.cli.tables import Column
    from specctl.orchestrator.config import profiles as profiles_mod

    app = App.from_env()
    rows = []
    for name, path in profiles_mod.available(app.dirs).items():
        try:
            desc = profiles_mod.load(str(path), app.dirs).description
        except SpecctlError as exc:
            desc = f"invalid: {exc}"
        source = "user" if path.is_relative_to(app.dirs.profiles) else "shipped"
        rows.append([name, source, desc, str(path)])
    if as_json:
        click.echo(json.dumps([dict(zip(("name", "source", "description", "path"), r,
                                        strict=True)) for r in rows], indent=2))
        return
    rows = [r[:3] for r in rows]
    tables.show(console, [Column("profile"), Column("source"), Column("description", text=True)],
                rows)


@profiles.command("new")
@click.argument("name")
@click.argument("ref", metavar="FROM-REF")
@override_flags
@click.option("--force", is_flag=True,
              help="Replace a profile of yours of that name, or shadow a shipped one.")
def profiles_new(name: str, ref: str, flags: Flags, force: bool) -> None:
    """Write the profile that `specctl up FROM-REF [flags]` runs, commented, to keep and edit.

    A model file's path is kept absolute (the profile works from any folder); a file that is
    not there, a --draft that names nothing, and a name a shipped profile has (unless --force)
    are refused.

    \b
    specctl profiles new coder hf:Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M --port 9000
    specctl plan -p coder          (plans what `specctl plan hf:... --port 9000` plans)"""
    from specctl.orchestrator.config import adhoc
    from specctl.orchestrator.config import profiles as profiles_mod
    from specctl.orchestrator.contract.dirs import Dirs
    from specctl.orchestrator.files import write_atomic

    dirs = Dirs.from_env()
    ref, flags = adhoc.pinned(ref, flags)
    path = profiles_mod.new_path(name, dirs, force)
    text = adhoc.toml_for(ref, flags, name)
    profiles_mod.parse(text, name=name, source=str(path))  # what is written is valid
    dirs.profiles.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)
    click.echo(path)
    err_console.print(f"plan it: specctl plan -p {name}    run it: specctl up -p {name}",
                      highlight=False)


@profiles.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON (stdout).")
def profiles_list(as_json: bool) -> None:
    """List the profiles, shipped and yours (the same as `specctl profiles`).

    \b
    specctl profiles list --json"""
    _list_profiles(as_json)


@profiles.command("show")
@click.argument("name", metavar="NAME|FILE")
@click.option("--json", "as_json", is_flag=True,
              help="Print the file's text and the resolved profile as one JSON document.")
def profiles_show(name: str, as_json: bool) -> None:
    """Print a profile: its file, then the profile as validated, with defaults and SPECCTL_*
    overrides filled in, as TOML comments (the whole stays TOML); --json: both in one JSON.

    \b
    specctl profiles show cpu-demo
    specctl profiles show ./mine.toml --json | jq .resolved.server"""
    from specctl.orchestrator.cli import tomltext
    from specctl.orchestrator.config import profiles as profiles_mod
    from specctl.orchestrator.contract.dirs import Dirs

    dirs = Dirs.from_env()
    path, text, profile = profiles_mod.shown(name, dirs)
    resolved = json.loads(profile.model_dump_json())
    if as_json:
        click.echo(json.dumps({"path": str(path), "text": text, "resolved": resolved}, indent=2))
        return
    click.echo(f"# {path}")
    click.echo(text.rstrip("\n"))
    click.echo("\n# resolved, with defaults and SPECCTL_* overrides:")
    click.echo("\n".join(f"# {line}" if line else "#" for line in tomltext.lines(resolved)))


@cli.command()
@HARDWARE
@click.option("--ray", "ray_address", metavar="ADDRESS",
              help="Also report the Ray cluster at ADDRESS (host:port or auto): nodes and GPUs.")
@click.option("--record", type=click.Path(dir_okay=False), metavar="FILE.json",
              help="Write this machine's hardware to FILE (in a folder that exists) for "
                   "planning elsewhere.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (stdout).")
def doctor(hardware: Path | None, ray_address: str | None, record: str | None,
           as_json: bool) -> None:
    """Show this machine, the backends found, and what would run here: the profiles whose plan
    fits and whose backend is here (or which `up` installs). With --hardware, the recorded
    machine and what would run there (its backends assumed: they are not known).

    \b
    specctl doctor
    specctl doctor --record my-box.json    (then `specctl plan -p NAME --hardware my-box.json`)"""
    from specctl.orchestrator import sanitise
    from specctl.orchestrator.app import App
    from specctl.orchestrator.cli import render
    from specctl.orchestrator.commands import doctor as command
    from specctl.orchestrator.files import output_path, write_output
    from specctl.orchestrator.machine import cluster

    if record is not None:
        output_path(record)  # a typo'd folder is refused before anything is detected
    nodes = (cluster.ray_nodes(ray_address, sys.executable) if ray_address is not None
             else None)  # first: an unreachable cluster is said before anything else
    app = App.from_env()
    hw = app.hardware(hardware)
    if record is not None:
        written = write_output(record, json.dumps(hw.to_json(), indent=2) + "\n")
        err_console.print(f"recorded to {sanitise.line(written)}", highlight=False,
                          markup=False)
    found = command.backends(app, hardware)
    verdicts = command.verdicts(app, hardware)
    if as_json:
        click.echo(json.dumps({"machine": hw.to_json(), "backends": [b.to_json() for b in found],
                               "tips": _tips(app, found), "profiles": [v.to_json()
                                                                       for v in verdicts]},
                              indent=2))
        return
    render.show_hardware(console, hw)
    console.print()
    render.hanging(console, [(f"{b.name:9}", sanitise.line(b.line)) for b in found])
    for tip in _tips(app, found):
        console.print(f"tip: {tip}", highlight=False, markup=False)
    if nodes is not None:
        _show_ray(ray_address or "", nodes)
    where = "there (the recorded machine)" if hardware else "here"
    console.print(f"\n[bold]what would run {where}[/bold]")
    render.hanging(console, [(f"  {v.profile}", sanitise.line(v.line)) for v in verdicts],
                   bold=False)


def _tips(app: App, found: list[command.Backend]) -> list[str]:
    probed = {b.name: b.found for b in found}
    return [tip for b in app.backends().values() for tip in b.tips(probed)]


def _show_ray(address: str, nodes: list[cluster.RayNode]) -> None:
    gpus = sum(n.gpus for n in nodes)
    console.print(f"\n[bold]ray[/bold]      {escape(address)}: {len(nodes)} node(s), {gpus} "
                  "GPU(s)", highlight=False)
    for n in nodes:
        console.print(f"  {n.address:15} {n.gpus} GPU(s), {n.cpus} CPU(s), "
                      f"{gib(n.memory_bytes)}", highlight=False)


@cli.command()
@model_or_profile
@HARDWARE
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (stdout).")
def plan(ref: str, flags: Flags, hardware: Path | None, as_json: bool) -> None:
    """Resolve the launch plan for a model or a profile without launching anything.

    \b
    specctl plan -p cpu-demo
    specctl plan hf:Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M --ctx 4096
    specctl plan -p m3-ultra-70b --hardware machine.json   (from `specctl doctor --record`)"""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.cli import render
    from specctl.orchestrator.contract.plan import plan_json

    app = App.from_env(say=lambda line: err_console.print(line, highlight=False, markup=False))
    resolved = app.resolve(app.load(ref, flags), hardware)
    launch = resolved.launch()
    found = _certificate(app, resolved) if hardware is None else None
    if as_json:
        data = plan_json(resolved.plan, resolved.installed, launch)
        data["certificate"] = found.to_json() if found else None
        click.echo(json.dumps(data, indent=2))
    else:
        render.show_plan(console, resolved.plan, resolved.installed, launch)
        if found is not None:
            console.print(f"\n[bold]certificate[/bold] {escape(found.line())}", highlight=False)
            shaped = found.structured_line()
            if shaped:
                console.print(f"[bold]certificate[/bold] {escape(shaped)}", highlight=False)


def _certificate(app: App, resolved: Resolved) -> certificates.Found | None:
    """Whether the planned speculation passed `bench --quality` on this engine build (None when
    it does not speculate or the engine is not installed here)."""
    from specctl.orchestrator.measure.results import certificates

    if not resolved.plan.speculative or resolved.installed.assumed:
        return None
    return certificates.for_plan(app.dirs.state, resolved.plan, resolved.installed, app.say)


@cli.group()
def backend() -> None:
    """Install and inspect serving backends."""


@backend.command("install")
@click.argument("name")
@click.option("--rebuild", is_flag=True, help="Build again even if a cached build exists.")
def backend_install(name: str, rebuild: bool) -> None:
    """Install a serving backend NAME (`specctl backend list` lists them; llama.cpp is also
    accepted for llamacpp), or use the one installed.

    llamacpp: uses an installed llama-server, or builds one from source (cached; ~6-13 min on
    2 cores): the llama.cpp tree inside the llama-cpp-python sdist on PyPI; Metal on macOS,
    CUDA when nvcc and an NVIDIA GPU are present, CPU otherwise; its RPC worker too.
    Others print how to install them.

    \b
    specctl backend install llamacpp"""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.contract import registry as backends
    from specctl.orchestrator.runtime import provision

    app = App.from_env()
    backend = app.backends()[backends.canonical(name)]
    found = backend.probe()
    if found is not None and not rebuild:
        console.print(f"using {found.describe()}", highlight=False)
        return
    if not provision.installable(backend):
        raise SpecctlError(f"specctl does not install {backend.name}; {backend.install_hint}")
    found = provision.install(backend, app.dirs, rebuild=rebuild)
    console.print(f"{backend.name} ready: {found.describe()}", highlight=False)


@cli.group()
def models() -> None:
    """Models: list what is here, pull from the Hugging Face Hub, remove, and the real test
    models of this project."""


@models.command("pull")
@click.argument("ref", metavar="REF")
@click.option("--backend", "backend_name", metavar="NAME",
              help="Whose default quantisation applies to hf:org/repo without one (default: "
                   "the first this machine would use).")
@click.option("--refresh", is_flag=True, help="Ask the Hub for the newest revision first.")
def models_pull(ref: str, backend_name: str | None, refresh: bool) -> None:
    """Download REF (hf:org/repo[:QUANT]) into the Hugging Face cache, with progress; a dropped
    connection resumes within the run; sizes and SHA-256 are checked; then print the local path.
    Another tool's model (e.g. ollama:NAME) is pulled through that tool's daemon.

    \b
    specctl models pull hf:bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0
    Honours HF_ENDPOINT, HF_TOKEN (gated repos) and HF_HUB_OFFLINE."""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.contract import registry as backends
    from specctl.orchestrator.models.info import parse_ref

    app = App.from_env()
    say = err_console.print
    parsed = parse_ref(ref)
    resolver = app.resolver()
    if parsed.scheme in resolver.stores:  # another tool's model: through that tool
        store = resolver.stores[parsed.scheme]
        path = store.pull(store.normalize(parsed.name), say)
        click.echo(f"{ref}: {path}")
        return
    if parsed.scheme != "hf":
        raise BadInputError(f"'{ref}': `models pull` fetches hf:org/repo[:QUANT] references "
                            "and the models of other tools' stores; did you mean hf:ORG/REPO?")
    name = (backends.canonical(backend_name) if backend_name
            else backends.default_order(app.hardware().kind)[0])
    if refresh:
        app.hub().repo(parsed.name, refresh=True)
    info = resolver.resolve(ref, app.backends()[name].default_quant)
    if info.path is not None:
        say("already on disk", highlight=False)
        click.echo(f"{info.ref}: {info.path}")
        return
    local = resolver.fetch(info, say)
    if local.path is None:  # known from the catalog only: nothing was fetched
        raise SpecctlError(f"{ref}: nothing was downloaded: "
                           f"{info.note or 'the Hub did not list its files'}")
    click.echo(f"{info.ref}: {local.path}")


@models.command("testbed")
def models_testbed() -> None:
    """Fetch the testbed GGUF models from PyPI, check their SHA-256, make the F16 target.

    Needs ~4.9 GiB in the cache dir; the F16 target needs a GGUF quantize tool from an installed
    backend (`specctl backend install llamacpp` builds one).

    \b
    specctl models testbed"""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.models import testbed
    from specctl.orchestrator.runtime import provision

    app = App.from_env()
    paths = provision.testbed_models(app.dirs, tuple(testbed.BY_KEY), app.backends(),
                                     console.print)
    for key, path in paths.items():
        console.print(f"{key:14} {path}", highlight=False)




def _folders(dirs: tuple[Path, ...]) -> tuple[Path, ...]:
    """Folders named on the command line: each one that is not a folder is refused (a typo
    would otherwise search nothing and say nothing)."""
    from specctl.orchestrator import sanitise

    for folder in dirs:
        if not folder.is_dir():
            raise click.BadParameter(f"{sanitise.line(folder)} is not a folder",
                                     param_hint="'--models-dir'")
    return dirs


@cli.command()
@click.argument("model", required=False, metavar="MODEL")
@click.option("--target", "target_flag", metavar="MODEL", hidden=True,
              help="The model as a flag (as before; the argument is the spelling of plan/up).")
@click.option("--backend", "backend_name", metavar="NAME",
              help="Whose vocabulary rule applies (default: the first this machine would use).")
@click.option("--models-dir", "models_dirs", multiple=True, type=click.Path(path_type=Path),
              callback=lambda _ctx, _param, dirs: _folders(dirs),
              help="Another folder of GGUF files to search (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def drafts(model: str | None, target_flag: str | None, backend_name: str | None,
           models_dirs: tuple[Path, ...], as_json: bool) -> None:
    """Compatible draft models for a target MODEL (a .gguf file, hf:ORG/REPO[:QUANT],
    STORE:NAME, testbed:KEY), ranked by expected speedup (the figure `plan` says), with reasons.

    Looks in specctl's cache, the Hugging Face cache, LM Studio's folder, Ollama's store,
    SPECCTL_MODELS_DIRS and --models-dir; on the Hugging Face Hub (smaller models of the target's
    family by its publisher, read without downloading weights); the catalog of known pairs; and
    draftless methods (the target's own MTP heads, n-gram). The filter is the
    backend's real rule (llama.cpp: same vocab type and BOS/EOS, sizes within 128, same tokens
    from id 5; vLLM: identical vocabularies).

    \b
    specctl drafts testbed:qwen-1.5b-f16
    specctl drafts hf:bartowski/Meta-Llama-3.1-70B-Instruct-GGUF:Q4_K_M --json"""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.cli import render
    from specctl.orchestrator.contract import registry as backends
    from specctl.orchestrator.contract.plan import model_json

    if bool(model) == bool(target_flag):
        raise click.UsageError("name the target model once: `specctl drafts MODEL`")
    target = model or target_flag or ""
    app = App.from_env()
    name = (backends.canonical(backend_name) if backend_name
            else backends.default_order(app.hardware().kind)[0])
    backend_obj = app.backends()[name]
    info = app.resolver().resolve(target, backend_obj.default_quant)
    installed = app.probe({name: backend_obj})[name] or backend_obj.assumed()
    ranked = app.draft_candidates(info, backend_obj, models_dirs, installed.methods)
    if as_json:
        click.echo(json.dumps({"target": model_json(info),
                               "candidates": [c.to_json() for c in ranked]}, indent=2))
    else:
        render.show_drafts(console, info.name, ranked)
