"""Commands that measure: bench and tune."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from specctl.orchestrator.cli.base import cli, console, err_console, seconds
from specctl.orchestrator.errors import NotUsableError
from specctl.orchestrator.measure.prompts import suites
from specctl.orchestrator.measure.prompts.workload import OBJECTIVES

if TYPE_CHECKING:

    from specctl.orchestrator.app import App
    from specctl.orchestrator.measure.prompts.workload import Workload

SUITES = "code,multiturn,docqa,article,math"  # bench's default suites: traffic's kinds
# tune's: one of each shape that fits its 4 minutes on cpu-demo (short prompt and long answer, a
# conversation, a long document and a short answer, and an edit whose answer copies its prompt:
# coding agents' traffic, where n-gram methods pay most, issue 60; with five suites of long
# prompts, under a core of outside load, a real tune's first block there was expected to take
# 1449 s with 130 s left; edit's prompts are short); its first prompts of each (7-12 stay unseen)
TUNE_SUITES = "code,multiturn,docqa,edit"


class _Finite(click.FloatRange):
    """A FloatRange that also refuses nan and inf (which pass its comparisons); its range is
    said when a value is refused, not in the help (each option's help is one line)."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number

    def _describe_range(self) -> str:
        return ""


class _Count(click.IntRange):
    """An IntRange whose range is said when a value is refused, not in the help."""

    name = "N"

    def _describe_range(self) -> str:
        return ""


def _ints(text: str | None) -> list[int]:
    try:
        found = [int(x) for x in text.split(",") if x.strip()] if text else []
    except ValueError:
        raise click.BadParameter(f"expected numbers like 2,4,8, got {text!r}") from None
    if any(not 1 <= n <= 256 for n in found):
        raise click.BadParameter(f"expected numbers from 1 to 256, got {text!r}")
    return found


def _workload(suite: str, prompts_arg: str, mix: str | None, profile_ref: str = "",
              max_tokens: int = 96) -> Workload:
    """The shipped suites (N prompts each), the user's prompts file or the traffic the
    gateway kept, and the mix."""
    from specctl.orchestrator.files import expand_user
    from specctl.orchestrator.measure.prompts import workload

    shares = workload.parse_mix(mix)
    if prompts_arg == "traffic":
        return _traffic(profile_ref, shares, max_tokens)
    span = re.fullmatch(r"([0-9]{1,2})(?:-([0-9]{1,2}))?", prompts_arg)
    if span:
        first, last = (1, int(span[1])) if span[2] is None else (int(span[1]), int(span[2]))
        if not 1 <= first <= last <= 12:
            raise click.BadParameter("--prompts N (1 to 12 per category) or A-B (of the 12, "
                                     "e.g. 7-12: those tune and the router never saw), or a "
                                     "file of yours")
        names = [n for n in suite.split(",") if n] if not shares else list(shares)
        return workload.from_suites({n: suites.load_suite(n)[first - 1:last]
                                     for n in names}, shares)
    path = expand_user(prompts_arg)
    if not path.exists():
        raise click.BadParameter(f"{path}: no such file (give a number of prompts per "
                                 "category, or a prompts file)")
    return workload.from_file(path, shares, per_category=12, say=_say)


def _traffic(profile_ref: str, shares: dict[str, float], max_tokens: int) -> Workload:
    """--prompts traffic: the requests the gateway kept for the profile's model (replay.py)."""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.measure.traffic import replay

    app = App.from_env()
    return replay.workload_of(app.dirs, app.load(profile_ref).name, shares, max_tokens, _say)


def _say(line: str) -> None:
    err_console.print(line, highlight=False, markup=False, soft_wrap=True)


PRECISION, BUDGET = 0.05, "4m"  # bench's and tune's defaults alike


def _shared(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options bench and tune share, one definition each: the profile, what speedup
    means, the traffic's mix, the concurrency, how long and how precisely to measure, the
    layout, JSON."""
    for option in reversed((
            click.option("--profile", "-p", "profile_ref", metavar="NAME|FILE",
                         help="A profile name or a .toml file."),
            click.option("--objective", type=click.Choice(OBJECTIVES), default="latency",
                         metavar="NAME", help="latency (default), decode or throughput."),
            click.option("--mix", metavar="CAT=SHARE,...",
                         help="Your traffic's mix (default: alike)."),
            click.option("--concurrency", "levels", metavar="N,N,...",
                         help="Requests at once (default: 1)."),
            click.option("--precision", default=PRECISION, metavar="FRACTION",
                         type=_Finite(0, 0.5),
                         help=f"Until each 95% interval is within it ({PRECISION}, 0 off)."),
            click.option("--budget", default=BUDGET, metavar="DURATION",
                         help=f"...or this much time is spent ({BUDGET})."),
            click.option("--sequential", is_flag=True, help="One server at a time."),
            click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout."))):
        func = option(func)
    return func


@cli.command()
@_shared
@click.option("--suite", default=SUITES, metavar="CATS", help=f"Suites ({SUITES}).")
@click.option("--prompts", "prompts_arg", default="4", metavar="N|A-B|FILE|traffic",
              help="Per suite (4), its A-B (7-12: unseen), a file, or traffic (README).")
@click.option("--k", "ks", metavar="K,K,...", help="Draft lengths (default: the plan's).")
@click.option("--also", metavar="M[:K],...", help="More settings: ngram:8, routed (README).")
@click.option("--repeats", default=2, type=_Count(1, 100), help="Passes, at least (2).")
@click.option("--max-tokens", default=96, type=_Count(1, 32768),
              help="Reply tokens a request (96).")
@click.option("--backends", "versus", metavar="A,B,...",
              help="Compare backends; save the fastest.")
@click.option("--untuned", is_flag=True, help="The profile as written, not tune's pick.")
@click.option("--quality", is_flag=True, help="Also test sampled output (temperature > 0).")
@click.option("--quality-against", type=click.Choice(["speculative", "baseline", "draft"]),
              default="speculative", metavar="SIDE",
              help="speculative (default), baseline or draft.")
@click.option("--samples", default=32, type=_Count(4, 1000),
              help="--quality: completions a prompt (32).")
@click.option("--temperature", type=_Finite(0.05, 2), metavar="T",
              help="--quality: temperature (the profile's).")
@click.option("--top-p", type=_Finite(0.01, 1), metavar="P",
              help="--quality: top-p (the profile's).")
@click.option("--floor/--no-floor", default=None, help="The numerics floor (with --quality).")
@click.option("--output", "-o", "json_out", type=click.Path(path_type=Path), metavar="FILE",
              help="Also write the report (JSON) here.")
@click.option("--plot", type=click.Path(path_type=Path), metavar="FILE.png",
              help="Plot the speedups (needs matplotlib).")
def bench(profile_ref: str | None, objective: str, mix: str | None, levels: str | None,
          precision: float, budget: str, sequential: bool, as_json: bool, suite: str,
          prompts_arg: str, ks: str | None, also: str | None, repeats: int, max_tokens: int,
          versus: str | None, untuned: bool, quality: bool, quality_against: str,
          samples: int, temperature: float | None, top_p: float | None, floor: bool | None,
          json_out: Path | None, plot: Path | None) -> None:
    """Measure speculation against the no-draft baseline here: per category and prompt
    length, the end-to-end speedup, TTFT and decode with 95% intervals; identity; --quality:
    sampling. How: README, "Is it faster here?".

    \b
    specctl bench -p cpu-demo --prompts 7-12 --also ngram:8"""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.cli import render
    from specctl.orchestrator.commands import bench as command
    from specctl.orchestrator.files import output_path
    from specctl.orchestrator.measure.results import reports

    if not profile_ref:
        raise click.UsageError("--profile is required")
    if plot:
        reports.check_plotting(plot)  # before minutes of measuring, not after
    for out in (json_out, plot):  # a missing folder, a FIFO: said now, not after measuring
        if out is not None:
            output_path(out)
    work = _workload(suite, prompts_arg, mix, profile_ref or "", max_tokens)
    app = App.from_env()
    if versus:
        _versus(app, profile_ref, versus, tuple(_ints(ks)), work, repeats, max_tokens,
                json_out, as_json, sequential, precision or None, _seconds(budget))
        return
    ask = command.Ask(profile_ref, work, tuple(_ints(ks)),
                      tuple(a for a in (also or "").split(",") if a.strip()), repeats,
                      max_tokens, tuple(_ints(levels)), quality, quality_against, samples,
                      temperature, top_p, floor, precision or None, _seconds(budget), sequential,
                      untuned, objective)  # type: ignore[arg-type]
    with render.progress_bar(err_console, "bench") as step:
        done = command.run(app, ask, step)
    _write(done.report, json_out, as_json, lambda: render.show_bench(console, done.report))
    if plot:
        reports.plot_bench(done.report, plot)
        err_console.print(f"plot: {plot}", highlight=False)
    err_console.print(f"raw samples: {done.saved}", highlight=False)
    if done.certificate:
        err_console.print(f"certificate: {done.certificate}", highlight=False, markup=False)
    if done.problem():
        raise NotUsableError(done.problem() or "")


def _write(data: object, path: Path | None, as_json: bool, show: Callable[[], None]) -> None:
    """A report: to --output FILE too, then as JSON on stdout (--json) or shown."""
    text = json.dumps(data, indent=2)
    if path is not None:
        from specctl.orchestrator.files import write_output

        write_output(path, text + "\n")
    click.echo(text) if as_json else show()


def _versus(app: App, profile_ref: str, names: str, ks: tuple[int, ...], work: Workload,
            repeats: int, max_tokens: int, json_out: Path | None, as_json: bool,
            sequential: bool, precision: float | None, budget: float) -> None:
    """bench --backends: each backend measured in turn; the fastest saved for this machine."""
    from specctl.orchestrator.cli import render
    from specctl.orchestrator.commands import bench as command
    from specctl.orchestrator.contract import registry

    wanted = list(dict.fromkeys(registry.canonical(n.strip()) for n in names.split(",")
                                if n.strip()))
    if len(wanted) < 2:
        raise click.BadParameter("--backends needs two or more backends (`specctl doctor` "
                                 "lists the installed ones)")
    with render.progress_bar(err_console, "bench") as step:
        done = command.versus(app, profile_ref, wanted, ks, work, repeats, max_tokens, step,
                              sequential, precision, budget)
    data = {"backends": done.reports, "winner": done.winner.model_dump()}

    def show() -> None:
        for report in done.reports:
            render.show_bench(console, report)
        for s in done.winner.speeds:
            console.print(f"{s.backend:10} {s.tps:7.1f} tok/s ({s.setting}, {s.speedup:.2f}x "
                          "its baseline)", highlight=False, markup=False)

    _write(data, json_out, as_json, show)
    line = f"fastest: {done.winner.why()}; saved to {done.saved}"
    if as_json:
        err_console.print(line, highlight=False, markup=False)
    else:
        console.print(f"{line}; `specctl plan -p {done.winner.profile}` now prefers it",
                      highlight=False, markup=False)


@cli.command()
@_shared
@click.option("--prompts", "prompts_arg", default="2", metavar="N|FILE|traffic",
              help="Per suite (the first 2), your file, or traffic (README).")
@click.option("--suite", default=TUNE_SUITES, metavar="CATS", help=f"Suites ({TUNE_SUITES}).")
@click.option("--max-tokens", default=64, type=_Count(1, 32768),
              help="Reply tokens a request (64).")
@click.option("--max-k", default=8, type=_Count(1, 32), help="The longest draft to try (8).")
@click.option("--quality/--no-quality", default=True, help="Check sampling before saving.")
@click.option("--show", is_flag=True, help="Print the saved result.")
@click.option("--exhaustive", is_flag=True, help="Measure every k to max-k (slow).")
@click.option("--what-if", is_flag=True, help="Only the cost model, for --alpha, --cost.")
@click.option("--alpha", type=_Finite(0, 1), metavar="A", help="Acceptance rate (--what-if).")
@click.option("--cost", type=_Finite(0, min_open=True), metavar="C",
              help="Draft/target step cost c (--what-if).")
def tune(profile_ref: str | None, objective: str, mix: str | None, levels: str | None,
         precision: float, budget: str, sequential: bool, as_json: bool, prompts_arg: str,
         suite: str, max_tokens: int, max_k: int, quality: bool, show: bool,
         exhaustive: bool, what_if: bool, alpha: float | None, cost: float | None) -> None:
    """Choose the speculation for your traffic here (a draft at some k, a p-min, n-gram,
    ngram-mod, a chain, or off) in one paired race within --budget; `plan` and `up` then
    use it. How: README, "Is it faster here?".

    \b
    specctl tune --what-if --alpha 0.8 --cost 0.1
    specctl tune -p cpu-demo"""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.cli import render
    from specctl.orchestrator.commands import tune as command

    if what_if:
        if alpha is None or cost is None:
            raise click.UsageError("--what-if needs --alpha and --cost")
        curve = command.what_if(alpha, cost, max_k)
        click.echo(json.dumps(curve, indent=2, allow_nan=False)) if as_json else \
            render.show_curve(console, curve)
        return
    if not profile_ref:
        raise click.UsageError("--profile is required (or use --what-if)")
    seconds = _seconds(budget)  # a bad duration is said before anything starts
    app = App.from_env()
    if show:
        found = command.saved(app, profile_ref)
        click.echo(json.dumps(found.to_json(), indent=2)) if as_json else \
            render.show_tuned(console, found)
        return
    streams = _ints(levels)
    work = _workload(suite, prompts_arg, mix, profile_ref or "", max_tokens)
    ask = command.Ask(profile_ref, work, max_k,
                      max(streams) if streams else None, max_tokens, quality, precision,
                      seconds, sequential, objective)  # type: ignore[arg-type]
    with render.progress_bar(err_console, "tune") as step:
        if exhaustive:
            swept = command.sweep(app, ask, step)
        else:
            done = command.run(app, ask, step)
    if exhaustive:
        data = render.sweep_json(swept.results, swept.baseline_tps, swept.seconds,
                                 swept.previous)
        click.echo(json.dumps(data, indent=2)) if as_json else render.show_sweep(console, data)
        return
    click.echo(json.dumps(done.result.to_json(), indent=2)) if as_json else \
        render.show_tuned(console, done.result)
    uses = ("now serve it" if done.result.serves else
            "serve without a draft (" + ("speculation off" if done.result.method == "none"
                                         else "not surely faster") + ")")
    err_console.print(f"saved ({done.result.state}): {done.saved}; `specctl plan/up -p "
                      f"{done.profile}` {uses}", highlight=False)


def _seconds(text: str) -> float:
    """'90s', '4m', '1h' or a number of seconds, for --budget."""
    return seconds(text, "--budget", 10, 24 * 3600)

