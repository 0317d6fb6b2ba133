"""Commands that measure: bench and tune."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from specctl.orchestrator.cli.base import PROFILE, cli, console
from specctl.orchestrator.errors import SpecctlError

if TYPE_CHECKING:
    from specctl.orchestrator.app import App
    from specctl.orchestrator.measure import tuned as tuned_mod

SUITES = "chat,code,summarize"  # the shipped prompt suites (measure/prompts)


def _ints(text: str | None) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()] if text else []
    except ValueError:
        raise click.BadParameter(f"expected numbers like 2,4,8, got {text!r}") from None


@cli.command()
@PROFILE
@click.option("--suite", default=SUITES, show_default=True,
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
    from specctl.orchestrator.app import App
    from specctl.orchestrator.cli import render
    from specctl.orchestrator.measure import bench as bench_mod
    from specctl.orchestrator.measure import reports

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

    Measures the target alone, the draft alone and one speculative run (k = 8 or max-k), fits the
    Leviathan cost model per prompt (acceptance by position, c, v(k)), measures the model's best k
    or its runner-up, tries n-gram and a p-min, and keeps the best measured - or "off" when
    nothing beats the baseline by 5%. A run that can no longer win stops early; the table marks
    it "(n/3 prompts)"."""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.cli import render
    from specctl.orchestrator.measure import trials
    from specctl.orchestrator.measure import tune as tune_mod
    from specctl.orchestrator.measure import tuned as tuned_mod
    from specctl.orchestrator.planning import costmodel

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
        runner = trials.Bench(resolved.backend, resolved.installed,
                              tuple(trials.tune_prompts()), max_tokens, app.dirs.logs, step)
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
    from specctl.orchestrator.measure import tuned as tuned_mod

    try:
        return tuned_mod.load(app.dirs.tuned, key)
    except SpecctlError:
        return None
