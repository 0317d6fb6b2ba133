"""Commands that show what is here: the models this machine holds (and removing one from the
Hugging Face cache), and the serving backends."""

from __future__ import annotations

import json
import sys

import click

from specctl.orchestrator.cli.base import console, err_console
from specctl.orchestrator.cli.setup import backend, models


@backend.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON (stdout).")
def backend_list(as_json: bool) -> None:
    """The serving backends specctl knows, whether each is installed here, and how to get it.

    \b
    specctl backend list"""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.cli import tables
    from specctl.orchestrator.cli.tables import Column

    app = App.from_env()
    registry = app.backends()
    probed = app.probe(registry)
    if as_json:
        click.echo(json.dumps([{"name": n, "installed": f is not None,
                                "version": f.version if f else None,
                                "path": f.path if f else None,
                                "install": registry[n].install_hint}
                               for n, f in probed.items()], indent=2))
        return
    tables.show(console, [Column("backend"), Column("installed"), Column("version"),
                          Column("where / how to install", text=True)],
                [[n, "yes" if f else "no", f.version if f else "-",
                  (f.path or "?") if f else registry[n].install_hint]
                 for n, f in probed.items()])


@models.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON (stdout).")
def models_list(as_json: bool) -> None:
    """Models on this machine with their sizes: specctl's cache, the Hugging Face cache, other
    tools' stores, LM Studio's folders and SPECCTL_MODELS_DIRS.

    \b
    specctl models list
    specctl models list --json"""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.cli import tables
    from specctl.orchestrator.cli.tables import Column
    from specctl.orchestrator.humanize import size
    from specctl.orchestrator.models import inventory

    app = App.from_env()
    resolver = app.resolver()
    found = inventory.held(app.dirs.models, resolver.hf_hub, resolver.stores.values(),
                           app.model_folders())
    if as_json:
        click.echo(json.dumps([h.to_json() for h in found], indent=2))
        return
    if not found:
        err_console.print("no models here yet (`specctl models pull hf:ORG/REPO:QUANT`)")
        return
    tables.show(console, [Column("model"), Column("where"), Column("size", right=True),
                          Column("path")],
                [[h.ref, h.where, size(h.size_bytes), str(h.path)] for h in found])


@models.command("rm")
@click.argument("ref", metavar="hf:ORG/REPO")
@click.option("--yes", "-y", is_flag=True, help="Do not ask.")
def models_rm(ref: str, yes: bool) -> None:
    """Remove a model repo from the Hugging Face cache (every revision and quantisation of it
    that is cached), through huggingface_hub's cache API.

    \b
    specctl models rm hf:bartowski/Llama-3.2-1B-Instruct-GGUF"""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.humanize import size
    from specctl.orchestrator.models import inventory

    hub = App.from_env().resolver().hf_hub
    if not yes and sys.stdin.isatty() and sys.stderr.isatty():
        click.confirm(f"remove every cached file of {ref} from {hub}?", abort=True, err=True)
    repo, freed = inventory.remove_hf(ref, hub)
    click.echo(f"removed hf:{repo} ({size(freed)} freed)")
