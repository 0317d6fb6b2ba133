"""Commands that measure: bench and tune."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from specctl.orchestrator.cli.base import PROFILE, cli, console, err_console, seconds
from specctl.orchestrator.errors import NotUsableError

if TYPE_CHECKING:
    from collections.abc import Callable

    from specctl.orchestrator.app import App
    from specctl.orchestrator.measure.workload import Workload

SUITES = "chat,code,summarize"  # the default suites (measure/prompts; `edit` on request)


class _Finite(click.FloatRange):
    """A FloatRange that also refuses nan and inf (which pass its comparisons)."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


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
    from specctl.orchestrator.measure import bench as bench_mod
    from specctl.orchestrator.measure import workload

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
        return workload.from_suites({n: bench_mod.load_suite(n)[first - 1:last]
                                     for n in names}, shares)
    path = expand_user(prompts_arg)
    if not path.exists():
        raise click.BadParameter(f"{path}: no such file (give a number of prompts per "
                                 "category, or a prompts file)")
    return workload.from_file(path, shares, per_category=12, say=_say)


def _traffic(profile_ref: str, shares: dict[str, float], max_tokens: int) -> Workload:
    """--prompts traffic: the requests the gateway kept for the profile's model (replay.py)."""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.measure import replay

    app = App.from_env()
    return replay.workload_of(app.dirs, app.load(profile_ref).name, shares, max_tokens, _say)


def _say(line: str) -> None:
    err_console.print(line, highlight=False, markup=False, soft_wrap=True)


@cli.command()
@PROFILE
@click.option("--suite", default=SUITES, show_default=True,
              help="Prompt categories, comma-separated: chat, code, summarize, edit (code edits "
                   "and answers from a pasted document).")
@click.option("--k", "ks", metavar="K,K,...", help="Draft lengths to compare (default: the "
              "plan's k).")
@click.option("--also", metavar="M[:K][+M[:K]],...", help="Other methods to measure in the same "
              "run, e.g. ngram:8,ngram-mod,draft+ngram-mod (a draft at each --k chained with "
              "ngram-mod), draft:3@0.5 (a draft at k=3 with p-min 0.5); K: the method's draft "
              "length (default: its usual one). `routed`: each prompt to the setting tune "
              "measured fastest for its kind, as the gateway routes requests. `baseline`: a "
              "second baseline server, the A/A control: it should measure 1.00x, and where "
              "its interval leaves 1.00x the run cannot tell differences that small apart.")
@click.option("--repeats", default=2, show_default=True, help="Passes over the prompts.")
@click.option("--prompts", "prompts_arg", default="4", show_default=True,
              metavar="N|A-B|FILE|traffic",
              help="Prompts per category (each shipped suite has 12), the suites' prompts A to "
                   "B (7-12: held out from tune and from the router's rules), a file of your "
                   "own (OpenAI chat lines, MT-Bench/Spec-Bench questions, ShareGPT, or text "
                   "lines), or `traffic`: the requests the gateway kept for this model, in "
                   "their mix.")
@click.option("--mix", metavar="CAT=SHARE,...",
              help="The share of each category in your traffic, e.g. code=0.6,chat=0.4: the "
                   "overall speedup weighs them so (default: alike).")
@click.option("--concurrency", "levels", metavar="N,N,...",
              help="Also measure N concurrent streams per level (e.g. 1,2,4): aggregate "
                   "tokens/s, latency, and where speculation stops paying.")
@click.option("--max-tokens", default=96, show_default=True)
@click.option("--output", "-o", "json_out", type=click.Path(path_type=Path), metavar="FILE",
              help="Also write the report (JSON) here (it is always saved under the state dir).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the report as JSON on stdout instead of the tables.")
@click.option("--plot", type=click.Path(path_type=Path), metavar="FILE.png",
              help="Plot tokens/s and speedup per category (needs matplotlib).")
@click.option("--quality", is_flag=True,
              help="Also check that sampling (temperature > 0) is unchanged by speculation, and "
                   "read greedy identity against its numerics floor.")
@click.option("--quality-against", type=click.Choice(["speculative", "baseline", "draft"]),
              default="speculative", show_default=True,
              help="What stands on the speculative side of --quality (baseline or draft: to "
                   "check the check itself: the first must pass, the second fail).")
@click.option("--samples", default=32, show_default=True, type=click.IntRange(4, 1000),
              help="--quality: completions per prompt and side.")
@click.option("--temperature", type=_Finite(0.05, 2),
              help="--quality: sampling temperature (default: the profile's [sampling]).")
@click.option("--top-p", type=_Finite(0.01, 1), help="--quality: top-p (default: the profile's).")
@click.option("--floor/--no-floor", default=None,
              help="Measure the greedy numerics floor (default: with --quality).")
@click.option("--precision", type=_Finite(0.005, 0.5), metavar="FRACTION",
              help="Keep measuring (more passes than --repeats) until every configuration's "
                   "95% interval is within this, e.g. 0.05 for +-5%, or --budget is spent.")
@click.option("--budget", default="10m", show_default=True, metavar="DURATION",
              help="With --precision: the most time to spend (e.g. 90s, 10m); no pass that "
                   "would end past it is started, not even one of --repeats (the first is).")
@click.option("--sequential", is_flag=True,
              help="One server at a time, in alternating blocks (what happens by itself when "
                   "the servers do not fit in memory together); the report gives the "
                   "baseline's drift between blocks.")
@click.option("--backends", "versus", metavar="A,B,...",
              help="Measure the profile on each of these installed backends (each with its "
                   "own speculation), save the fastest for this machine: `plan` then prefers "
                   "it.")
@click.option("--untuned", is_flag=True,
              help="Start from the profile as written, not from the setting `specctl tune` "
                   "saved (e.g. to measure the draft alone at --k when tune saved a chain).")
def bench(profile_ref: str, suite: str, ks: str | None, also: str | None, repeats: int,
          prompts_arg: str,
          mix: str | None, levels: str | None, max_tokens: int, json_out: Path | None,
          as_json: bool, plot: Path | None, quality: bool,
          quality_against: str, samples: int, temperature: float | None, top_p: float | None,
          floor: bool | None, precision: float | None, budget: str, sequential: bool,
          versus: str | None, untuned: bool) -> None:
    """Measure the speedup over the no-draft baseline on this machine, same prompts and build.

    Baseline and speculative servers run side by side and get the same requests interleaved,
    temperature 0. Reports decode tokens/s, speedup (throughput against the baseline, the
    categories weighted by --mix, with a bootstrap 95% interval), acceptance, accepted tokens per
    step, per-level figures with --concurrency, and how many greedy outputs were
    identical to the baseline's (against the floor: the target verifying drafts it always
    rejects). --quality then samples both servers and tests whether the output distributions
    differ, per category, with a false-alarm rate of 5%.

    \b
    specctl bench -p cpu-demo --prompts 2          (after `specctl up -p cpu-demo` provided it)
    specctl bench -p cpu-demo --json > report.json"""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.cli import render
    from specctl.orchestrator.commands import bench as command
    from specctl.orchestrator.files import output_path
    from specctl.orchestrator.measure import reports

    if plot:
        reports.check_plotting(plot)  # before minutes of measuring, not after
    for out in (json_out, plot):  # a missing folder, a FIFO: said now, not after measuring
        if out is not None:
            output_path(out)
    work = _workload(suite, prompts_arg, mix, profile_ref, max_tokens)
    app = App.from_env()
    if versus:
        _versus(app, profile_ref, versus, tuple(_ints(ks)), work, repeats, max_tokens,
                json_out, as_json, sequential, precision, _seconds(budget))
        return
    ask = command.Ask(profile_ref, work, tuple(_ints(ks)),
                      tuple(a for a in (also or "").split(",") if a.strip()), repeats,
                      max_tokens, tuple(sorted(set(_ints(levels) or [1]) | {1})), quality,
                      quality_against, samples, temperature, top_p, floor, precision,
                      _seconds(budget), sequential, untuned)
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
    from specctl.adapters import registry
    from specctl.orchestrator.cli import render
    from specctl.orchestrator.commands import bench as command

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
@click.option("--profile", "-p", "profile_ref", metavar="NAME|FILE",
              help="Profile to tune (not needed with --what-if).")
@click.option("--what-if", is_flag=True, help="Only the cost model: the best k for --alpha and "
              "--cost, with v(k) = 1 (the paper's assumption).")
@click.option("--alpha", type=_Finite(0, 1), help="Acceptance rate (with --what-if).")
@click.option("--cost", type=_Finite(0, min_open=True),
              help="Draft/target step cost ratio c (with --what-if).")
@click.option("--max-k", default=8, show_default=True, type=click.IntRange(1, 32))
@click.option("--exhaustive", is_flag=True,
              help="Measure every k in 1..max-k (slow; for checking the tuner itself).")
@click.option("--show", is_flag=True, help="Print the saved result: predicted vs measured.")
@click.option("--prompts", "prompts_arg", default="2", show_default=True,
              metavar="N|FILE|traffic",
              help="Prompts per category of the shipped suites, your prompts file (OpenAI chat "
                   "lines, MT-Bench/Spec-Bench questions, ShareGPT, or text lines), or "
                   "`traffic`: the requests the gateway kept for this model, in their mix.")
@click.option("--mix", metavar="CAT=SHARE,...",
              help="Your traffic's mix, e.g. chat=1 or code=0.6,chat=0.4, edit=0.5,code=0.5 "
                   "(default: alike).")
@click.option("--concurrency", type=click.IntRange(1, 256),
              help="Concurrent requests to tune for (default: the profile's server.parallel).")
@click.option("--max-tokens", default=64, show_default=True)
@click.option("--quality/--no-quality", default=True, show_default=True,
              help="Before saving, sample the chosen setting against the target alone at the "
                   "profile's temperature (16 short completions, one prompt per category) and "
                   "refuse to save one whose output differs.")
@click.option("--precision", default=0.05, show_default=True, type=_Finite(0.005, 0.5),
              help="Measure until the speedup's 95% interval is within this (0.05: +-5%).")
@click.option("--budget", default="4m", show_default=True, metavar="DURATION",
              help="...or until this much time is spent (e.g. 90s, 4m, 15m), server starts "
                   "and the sampling check included; a challenger that no longer fits is "
                   "listed as not measured.")
@click.option("--sequential", is_flag=True,
              help="One server at a time, in alternating blocks (what happens by itself when "
                   "the baseline and a speculative server do not fit in memory together).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def tune(profile_ref: str | None, what_if: bool, alpha: float | None, cost: float | None,
         max_k: int, exhaustive: bool, show: bool, prompts_arg: str, mix: str | None,
         concurrency: int | None, max_tokens: int, quality: bool, precision: float,
         budget: str, sequential: bool, as_json: bool) -> None:
    """Choose the speculation for your traffic on this machine (a draft at some k, a p-min,
    n-gram, ngram-mod, a chain, or off); `plan` and `up` then use it.

    One paired race against the baseline on the workload (--prompts, --mix) at the profile's
    concurrency, within --budget (everything included: server starts, the sampling check).
    After short draft-alone timings (c, at most 15% of the budget), every configuration the
    engine has enters the first block as far as the budget has room (in this order: the draft
    at the cost model's k, n-gram and, on llama.cpp, the draft chained with ngram-mod, the
    draft at 2 and max-k, ngram-mod, a p-min; the rest wait for later blocks, and one never
    measured is listed). Every request is full length (--max-tokens: a short reply's speedup
    is not a long one's); losers leave by paired intervals against the leader (a challenger
    leads only when it is surely 5% faster). The cost model, fitted to the race's own
    counters and step times, adds its favourite k when it was not raced. The best measured is
    always saved with its 95% interval, "settled" when the interval reached --precision on two
    requests of each category or more (or "off" was decided) and "provisional" when the budget
    ran out first; `up` serves it only when its interval's bottom is above 1.00x. Each
    category's winner is saved too. On backends that switch k by batch size (vLLM) it also
    measures that schedule. Before saving, a short sampling check (--no-quality skips it)
    refuses a setting whose output at temperature > 0 differs from the target's alone;
    `bench --quality` is the full check.

    \b
    specctl tune --what-if --alpha 0.8 --cost 0.1    (the cost model alone)
    specctl tune -p cpu-demo                         (after `specctl up -p cpu-demo`)"""
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
    ask = command.Ask(profile_ref, _workload("code,chat,summarize", prompts_arg, mix,
                                             profile_ref, max_tokens), max_k,
                      concurrency, max_tokens, quality, precision, seconds, sequential)
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

