"""`specctl traffic [MODEL]`: what the gateway kept of each model's requests; `specctl traffic
forget [MODEL]` deletes it."""

from __future__ import annotations

import json
from typing import Any

import click

from specctl.orchestrator.cli.base import cli, console, err_console
from specctl.orchestrator.cli.wrap import Group


class _ShowByDefault(Group):
    """`traffic [MODEL]` is `traffic show [MODEL]`; `traffic forget` is its own command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help")):
            args = ["show", *args]
        return super().parse_args(ctx, args)


@cli.group(cls=_ShowByDefault)
def traffic() -> None:
    """The requests the gateway kept of each model (where its profile sets [gateway]
    keep_traffic = N): their kinds and lengths; `bench` and `tune` replay them with
    --prompts traffic.

    \b
    specctl traffic                  every model's
    specctl traffic cpu-demo --json
    specctl traffic forget cpu-demo  delete it (all models' with no name)"""


@traffic.command("show", short_help="Summarise the kept requests (the default).")
@click.argument("model", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (stdout).")
def show(model: str | None, as_json: bool) -> None:
    """Count, kinds (share), prompt lengths (tokens in: median, p90, max, and how many under
    256, 256-1k, 1k-4k, 4k and over), answer lengths, oldest and newest, per model.

    \b
    specctl traffic show
    specctl traffic show cpu-demo --json"""
    from specctl.orchestrator.contract.dirs import Dirs
    from specctl.orchestrator.measure.traffic import replay

    found, notes = replay.summaries(Dirs.from_env(), model)
    for note in notes:
        err_console.print(f"specctl: {note}", highlight=False, markup=False, soft_wrap=True)
    if as_json:
        click.echo(json.dumps(found, indent=2))
    elif not found and not notes:
        console.print("no traffic kept: the gateway keeps a model's last N requests where its "
                      "profile sets [gateway] keep_traffic = N", highlight=False, markup=False)
    for item in [] if as_json else found:
        _show(item)
    if notes:
        raise SystemExit(1)


def _show(s: dict[str, Any]) -> None:
    n = s["requests"]
    skipped = f" ({s['not_kept']} more over 256 KiB not kept)" if s["not_kept"] else ""
    ins, outs = s["tokens_in"], s["tokens_out"]
    lines = [
        f"{s['model']}: {n} requests{skipped}, {s['oldest']} to {s['newest']}",
        "  kinds: " + ", ".join(f"{k} {v['share']:.0%} ({v['requests']})"
                                for k, v in s["kinds"].items()),
        f"  prompt tokens: median {ins['median']:g}, p90 {ins['p90']}, max {ins['max']}",
        "  prompts by tokens: " + ", ".join(f"{label} {count}"
                                            for label, count in ins["buckets"].items()),
        f"  answer tokens: median {outs['median']:g}, p90 {outs['p90']}, max {outs['max']}",
        f"  {'enough' if s['enough_for_idle_tune'] else 'not yet enough'} for the gateway's "
        f"idle tune to use it (40 requests)"]
    for line in lines:
        console.print(line, highlight=False, markup=False)
    console.print(f"  kept in {s['file']}", highlight=False, markup=False, soft_wrap=True)


@traffic.command("forget", short_help="Delete them.")
@click.argument("model", required=False)
def forget(model: str | None) -> None:
    """Delete MODEL's kept requests (every model's with no MODEL); asks nothing.

    \b
    specctl traffic forget cpu-demo
    specctl traffic forget            every model's"""
    from specctl.orchestrator.contract.dirs import Dirs
    from specctl.orchestrator.measure.traffic import store as store

    dirs = Dirs.from_env()
    gone = store.forget(dirs, model)
    if model is not None and not gone and store.close(dirs, model):
        raise store.unknown(dirs, model)  # a misspelling: did you mean...
    for path in gone:
        console.print(f"deleted {path}", highlight=False, markup=False, soft_wrap=True)
    if not gone:
        console.print(f"no traffic kept{f' for {model}' if model else ''}; nothing deleted",
                      highlight=False, markup=False)
