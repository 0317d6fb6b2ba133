"""llama.cpp adapter: the dialect from the real --help, plan -> argv, and the draft counters."""

from __future__ import annotations

import itertools
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest

from specctl.adapters import prometheus
from specctl.adapters.llamacpp import LlamaCpp, LlamaCppOptions, request_stats
from specctl.adapters.llamacpp_dialect import (
    LEGACY_DIALECT,
    SPEC_TYPE_DIALECT,
    installed_from,
    methods_of,
    parse_help,
    parse_version,
)
from specctl.orchestrator.contract.hardware import Gpu
from specctl.orchestrator.contract.launch import Installed
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.errors import BackendError
from tests import plans

LEGACY_HELP = """\
-m,    --model FNAME                    model path to load
-md,   --model-draft FNAME              draft model for speculative decoding (default: unused)
--draft-max, --draft, --draft-n N       number of tokens to draft (default: 16)
--draft-min, --draft-n-min N            minimum number of draft tokens (default: 0)
--draft-p-min P                         minimum speculative decoding probability (default: 0.8)
-ngld, --gpu-layers-draft N             number of layers to store in VRAM for the draft model
-ctkd, --cache-type-k-draft TYPE        KV cache data type for K for the draft model
-ctvd, --cache-type-v-draft TYPE        KV cache data type for V for the draft model
--host HOST                             ip address to listen (default: 127.0.0.1)
--port PORT                             port to listen (default: 8080)
-c,    --ctx-size N                     size of the prompt context
-np,   --parallel N                     number of parallel sequences to decode
-t,    --threads N                      number of threads
-ngl,  --gpu-layers N                   number of layers to store in VRAM
--metrics                               enable prometheus compatible metrics endpoint
"""


def real_help() -> str:
    folder = resources.files("specctl.adapters") / "dialects"
    return (folder / "llama-server-0c1e570.help").read_text()


def pairs(argv: tuple[str, ...]) -> set[tuple[str, str]]:
    return set(itertools.pairwise(argv))


@pytest.fixture
def cpu_plan() -> Plan:
    """The cpu-demo plan on the recorded 2-core machine, built directly (no model files)."""
    return plans.plan()


# --- --help parsing -------------------------------------------------------------------------


def test_parse_real_help_flags() -> None:
    parsed = parse_help(real_help())
    assert parsed.dialect == SPEC_TYPE_DIALECT
    for flag in ("-m", "--model", "-md", "--spec-draft-model", "--spec-draft-n-max",
                 "--spec-draft-n-min", "--spec-draft-p-min", "--draft-p-min", "-ngld",
                 "--metrics", "--spec-type", "-hfd", "-ctkd", "--spec-draft-type-k"):
        assert flag in parsed.flags, flag


def test_parse_real_help_removed_flags() -> None:
    parsed = parse_help(real_help())
    for flag in ("--draft-max", "--draft-min", "--draft"):
        assert flag not in parsed.flags
        assert flag in parsed.removed


def test_parse_real_help_spec_types() -> None:
    spec_types = parse_help(real_help()).spec_types
    assert "draft-simple" in spec_types
    assert "ngram-simple" in spec_types
    assert "draft-eagle3" in spec_types


def test_methods_of_real_help() -> None:
    methods = methods_of(parse_help(real_help()))
    assert {"none", "draft", "ngram"} <= methods


def test_parse_legacy_help() -> None:
    parsed = parse_help(LEGACY_HELP)
    assert parsed.dialect == LEGACY_DIALECT
    assert "--draft-max" in parsed.flags
    assert parsed.removed == frozenset()
    assert parsed.spec_types == frozenset()
    assert methods_of(parsed) == frozenset({"none", "draft"})


@pytest.mark.parametrize(("text", "version"), [
    ("version: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU", "0.5.0-dev (build 1, "
                                                                      "commit 0c1e570)"),
    ("version: 5460 (a1b2c3d)\n", "5460 (a1b2c3d)"),
    ("no version here", "unknown"),
])
def test_parse_version(text: str, version: str) -> None:
    assert parse_version(text) == version


def test_assumed_is_the_shipped_dialect() -> None:
    installed = LlamaCpp().assumed()
    assert installed.assumed
    assert installed.backend == "llamacpp"
    assert installed.dialect == SPEC_TYPE_DIALECT
    assert installed.version == "0.5.0-dev (build 1, commit 0c1e570)"
    assert installed.path is None
    assert "--spec-draft-n-max" in installed.flags
    assert "assumed, not installed here" in installed.describe()


# --- launch ---------------------------------------------------------------------------------


def test_launch_for_the_cpu_demo_plan(cpu_plan: Plan) -> None:
    launch = LlamaCpp().launch(cpu_plan, LlamaCpp().assumed())
    argv = launch.argv
    assert argv[0] == "llama-server"
    got = pairs(argv)
    assert ("--spec-type", "draft-simple") in got
    assert ("-m", str(cpu_plan.target.path)) in got
    assert cpu_plan.draft is not None
    assert ("-md", str(cpu_plan.draft.path)) in got
    assert ("--spec-draft-n-max", str(cpu_plan.k)) in got
    assert ("--host", "127.0.0.1") in got
    assert ("--port", str(cpu_plan.port)) in got
    assert ("-c", "4096") in got
    assert ("-t", "2") in got  # the recorded machine's cores
    assert ("--fit", "on") in got and ("--fit-ctx", "4096") in got  # llama.cpp fits the rest
    assert "-ngl" not in argv and "--fit-target" not in argv  # no GPU to leave a margin on
    assert "--metrics" in argv
    assert "--draft-max" not in argv
    assert "-ngld" not in argv  # CPU: no GPU layers
    url = f"http://127.0.0.1:{cpu_plan.port}"
    assert launch.base_url == f"{url}/v1"
    assert launch.health_url == f"{url}/health"
    assert launch.metrics_url == f"{url}/metrics"
    assert launch.env_from == {}


def test_every_flag_in_argv_is_one_the_build_has(cpu_plan: Plan) -> None:
    installed = LlamaCpp().assumed()
    argv = LlamaCpp().launch(cpu_plan, installed).argv
    assert all(a in installed.flags for a in argv if a.startswith("-") and not a[1:].isdigit())


def test_missing_p_min_flag_is_an_error_naming_it(cpu_plan: Plan) -> None:
    full = LlamaCpp().assumed()
    old = Installed(backend="llamacpp", version="b4000", dialect=SPEC_TYPE_DIALECT,
                    path="/opt/llama/llama-server",
                    flags=full.flags - {"--spec-draft-p-min", "--draft-p-min"},
                    methods=frozenset({"none", "draft"}))
    launch = LlamaCpp().launch(cpu_plan, old)  # no p_min asked: fine
    assert launch.argv[0] == "/opt/llama/llama-server"
    with pytest.raises(BackendError, match="--spec-draft-p-min") as info:
        LlamaCpp().launch(cpu_plan.but(p_min=0.5), old)
    assert "b4000" in str(info.value)


def test_p_min_and_n_min(cpu_plan: Plan) -> None:
    plan = cpu_plan.but(p_min=0.6, options=LlamaCppOptions(n_min=1))
    argv = LlamaCpp().launch(plan, LlamaCpp().assumed()).argv
    assert ("--spec-draft-p-min", "0.6") in pairs(argv)
    assert ("--spec-draft-n-min", "1") in pairs(argv)


def test_legacy_dialect_argv(cpu_plan: Plan) -> None:
    legacy = installed_from(LEGACY_HELP, "version: 3000 (abc)", "/usr/bin/llama-server")
    argv = LlamaCpp().launch(cpu_plan.but(p_min=0.7), legacy).argv
    got = pairs(argv)
    assert "--spec-type" not in argv
    assert ("--draft-max", str(cpu_plan.k)) in got
    assert ("--draft-p-min", "0.7") in got
    assert "--spec-draft-n-max" not in argv


def test_each_slot_holds_the_plans_context(cpu_plan: Plan) -> None:
    """Each slot is its own `plan.context` tokens of the KV (-c is shared out among the slots):
    tune's quality check, 8 slots, once had a 745-token prompt refused at 4096/8 = 512; and
    slots sharing one pool fail every request in flight when together they overflow it, where
    here a request past its own slot's context fails alone."""
    argv = LlamaCpp().launch(cpu_plan, LlamaCpp().assumed()).argv
    assert ("-c", "4096") in pairs(argv) and ("-np", "1") in pairs(argv)
    argv = LlamaCpp().launch(cpu_plan.but(parallel=8), LlamaCpp().assumed()).argv
    assert ("-c", str(8 * 4096)) in pairs(argv) and ("-np", "8") in pairs(argv)
    assert "--kv-unified" not in argv


def test_quantised_cache_applies_to_both_models(cpu_plan: Plan) -> None:
    plan = cpu_plan.but(memory=replace(cpu_plan.memory, cache_type="q8_0"),
                        hardware=replace(cpu_plan.hardware, gpus=(Gpu("GPU", 24 << 30, 0),)),
                        options=LlamaCppOptions(fit="off"))
    got = pairs(LlamaCpp().launch(plan, LlamaCpp().assumed()).argv)
    for flag in ("-ctk", "-ctv", "--spec-draft-type-k", "--spec-draft-type-v"):
        assert (flag, "q8_0") in got
    assert ("-ngl", "999") in got
    assert ("-ngld", "999") in got


def test_baseline_has_no_draft(cpu_plan: Plan) -> None:
    argv = LlamaCpp().launch(cpu_plan.baseline(), LlamaCpp().assumed()).argv
    for flag in ("-md", "--spec-type", "--spec-draft-n-max"):
        assert flag not in argv


def test_ngram_argv(cpu_plan: Plan) -> None:
    full = LlamaCpp().assumed()
    with_ngram = replace(full, methods=full.methods | {"ngram"})
    plan = cpu_plan.but(method="ngram", draft=None, k=5, ngram_max=3)
    argv = LlamaCpp().launch(plan, with_ngram).argv
    got = pairs(argv)
    assert ("--spec-type", "ngram-simple") in got
    assert ("--spec-ngram-simple-size-n", "3") in got
    assert ("--spec-ngram-simple-size-m", "5") in got
    assert "-md" not in argv


def test_unsupported_method_is_refused(cpu_plan: Plan) -> None:
    with pytest.raises(BackendError, match="cannot do 'eagle'"):
        LlamaCpp().launch(cpu_plan.but(method="eagle"), LlamaCpp().assumed())


@pytest.mark.parametrize(("host", "url_host"), [("0.0.0.0", "127.0.0.1"), ("::1", "[::1]"),
                                                ("localhost", "localhost")])
def test_urls_for_other_hosts(cpu_plan: Plan, host: str, url_host: str) -> None:
    launch = LlamaCpp().launch(cpu_plan.but(host=host), LlamaCpp().assumed())
    assert ("--host", host) in pairs(launch.argv)
    assert launch.health_url == f"http://{url_host}:{cpu_plan.port}/health"


def test_api_key_comes_from_the_environment_not_argv(cpu_plan: Plan) -> None:
    launch = LlamaCpp().launch(cpu_plan.but(api_key_env="MY_SECRET_VAR"), LlamaCpp().assumed())
    assert launch.env_from == {"LLAMA_API_KEY": "MY_SECRET_VAR"}
    assert "--api-key" not in launch.argv
    assert "MY_SECRET_VAR" not in launch.argv


def test_hf_models_not_on_disk_use_hf_flags(cpu_plan: Plan) -> None:
    assert cpu_plan.draft is not None
    target = replace(cpu_plan.target, path=None, ref="hf:org/Target-GGUF:Q4_K_M")
    draft = replace(cpu_plan.draft, path=None, ref="hf:org/Draft-GGUF:Q8_0")
    got = pairs(LlamaCpp().launch(cpu_plan.but(target=target, draft=draft),
                                  LlamaCpp().assumed()).argv)
    assert ("-hf", "org/Target-GGUF:Q4_K_M") in got
    assert ("-hfd", "org/Draft-GGUF:Q8_0") in got


def test_model_neither_on_disk_nor_on_hf_is_an_error(cpu_plan: Plan) -> None:
    target = replace(cpu_plan.target, path=None, ref="ollama:qwen:latest")
    with pytest.raises(BackendError, match="not on disk"):
        LlamaCpp().launch(cpu_plan.but(target=target), LlamaCpp().assumed())


def test_locate_prefers_the_configured_binary(tmp_path: Path) -> None:
    configured = tmp_path / "llama-server"
    configured.write_text("#!/bin/sh\n")
    assert LlamaCpp(configured=configured, search_path=()).locate() == configured


# --- counters -------------------------------------------------------------------------------


def test_request_stats_from_timings() -> None:
    stats = request_stats({"content": "hi", "timings": {"predicted_n": 64, "draft_n": 40,
                                                        "draft_n_accepted": 30}})
    assert (stats.drafted, stats.accepted) == (40, 30)
    assert stats.acceptance_rate == pytest.approx(0.75)
    assert stats.source == "llamacpp timings"


def test_request_stats_when_nothing_was_drafted() -> None:
    for response in ({"content": "hi"}, {"timings": None}, {"timings": {"predicted_n": 3}}):
        stats = request_stats(response)
        assert (stats.drafted, stats.accepted) == (0, 0)
        assert stats.acceptance_rate is None


LLAMACPP_METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1024
# HELP llamacpp:spec_decode_num_drafts_total Number of draft steps.
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 30
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 120
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 87
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 29
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 25
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 13
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 20
"""


def test_prometheus_spec_stats_llamacpp() -> None:
    stats = prometheus.spec_stats(LLAMACPP_METRICS, "llamacpp:", "llamacpp /metrics")
    assert (stats.drafted, stats.accepted, stats.drafts) == (120, 87, 30)
    assert stats.per_position == (29, 25, 20, 13)
    assert stats.acceptance_rate == pytest.approx(87 / 120)
    assert stats.mean_accepted_length == pytest.approx(2.9)
    assert stats.source == "llamacpp /metrics"


def test_prometheus_missing_position_is_zero() -> None:
    text = ('llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 5\n'
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 1\n')
    assert prometheus.spec_stats(text, "llamacpp:", "x").per_position == (5, 0, 1)


def test_prometheus_without_spec_counters() -> None:
    stats = prometheus.spec_stats("llamacpp:prompt_tokens_total 5\n", "llamacpp:", "x")
    assert stats == SpecStats(source="x")
    assert stats.acceptance_rate is None
    assert stats.mean_accepted_length is None


def test_prometheus_vllm_sums_label_sets_and_reads_exponents() -> None:
    text = """\
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 1.0e+01
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 20.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 12.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 4.0
llamacpp:spec_decode_num_draft_tokens_total 999
"""
    stats = prometheus.spec_stats(text, "vllm:", "vllm /metrics")
    assert (stats.drafts, stats.drafted, stats.accepted) == (15, 60, 42)
    assert stats.per_position == (13,)


def test_spec_stats_subtraction_and_rates() -> None:
    before = SpecStats(drafted=100, accepted=70, drafts=25, per_position=(24, 20, 15, 11),
                       source="llamacpp /metrics")
    after = SpecStats(drafted=180, accepted=130, drafts=45, per_position=(44, 38, 28, 20),
                      source="llamacpp /metrics")
    delta = after - before
    assert (delta.drafted, delta.accepted, delta.drafts) == (80, 60, 20)
    assert delta.per_position == (20, 18, 13, 9)
    assert delta.acceptance_rate == pytest.approx(0.75)
    assert delta.mean_accepted_length == pytest.approx(3.0)
    assert delta.source == "llamacpp /metrics"


def test_spec_stats_subtraction_pads_positions() -> None:
    delta = SpecStats(10, 5, 2, (3, 2, 1)) - SpecStats(4, 2, 1, (2,))
    assert delta == SpecStats(6, 3, 1, (1, 2, 1))


def test_spec_stats_addition() -> None:
    total = SpecStats(10, 8, 2, (2,), "a") + SpecStats(5, 1, 1, (1, 1), "b")
    assert total == SpecStats(15, 9, 3, (3, 1), "a")


def test_prometheus_label_values_may_hold_a_brace() -> None:
    """Read with prometheus_client's parser: the earlier hand regex stopped a label set at the
    first `}` and misread such a line."""
    text = ('# TYPE vllm:spec_decode_num_draft_tokens counter\n'
            'vllm:spec_decode_num_draft_tokens_total{model_name="odd}name",engine="0"} 7.0\n')
    samples = prometheus.parse(text)
    assert prometheus.total(samples, "vllm:spec_decode_num_draft_tokens_total") == 7.0
    ((_, labels),) = samples.keys()
    assert dict(labels)["model_name"] == "odd}name"
    with pytest.raises(BackendError, match="not Prometheus text"):
        prometheus.parse('bad{label="x" 1\n')
