"""TGI launcher dialect: the recorded launcher reference parses, and argv is checked against it."""

from __future__ import annotations

from importlib import resources

import pytest

from specctl.adapters.tgi_launcher import VERSION, LauncherOption, load, parse, validate

OPTIONS = load()


def test_recorded_file_and_its_source_are_packaged() -> None:
    folder = resources.files("specctl.adapters") / "dialects"
    source = (folder / f"tgi-launcher-{VERSION}.source").read_text()
    assert f"tag: v{VERSION}" in source
    assert "docs/source/reference/launcher.md" in source
    assert len(OPTIONS) == 56  # 54 fields of `struct Args` at v3.3.7, plus --help and --version


@pytest.mark.parametrize(("flag", "env", "default"), [
    ("--model-id", "MODEL_ID", "bigscience/bloom-560m"),
    ("--speculate", "SPECULATE", None),
    ("--num-shard", "NUM_SHARD", None),
    ("--sharded", "SHARDED", None),
    ("--hostname", "HOSTNAME", "0.0.0.0"),
    ("--port", "PORT", "3000"),
    ("--prometheus-port", "PROMETHEUS_PORT", "9000"),
    ("--cuda-memory-fraction", "CUDA_MEMORY_FRACTION", "1.0"),
    ("--max-total-tokens", "MAX_TOTAL_TOKENS", None),
    ("--max-input-tokens", "MAX_INPUT_TOKENS", None),
    ("--max-batch-prefill-tokens", "MAX_BATCH_PREFILL_TOKENS", None),
    ("--api-key", "API_KEY", None),
    ("--huggingface-hub-cache", "HUGGINGFACE_HUB_CACHE", None),
    ("--usage-stats", "USAGE_STATS", "on"),
    ("--graceful-termination-timeout", "GRACEFUL_TERMINATION_TIMEOUT", "90"),
])
def test_known_options(flag: str, env: str, default: str | None) -> None:
    opt = OPTIONS[flag]
    assert (opt.env, opt.default, opt.takes_value) == (env, default, True)


def test_flags_shorts_and_possible_values() -> None:
    assert OPTIONS["--quantize"].possible_values == (
        "awq", "compressed-tensors", "eetq", "exl2", "gptq", "marlin", "bitsandbytes",
        "bitsandbytes-nf4", "bitsandbytes-fp4", "fp8")
    assert OPTIONS["--dtype"].possible_values == ("float16", "bfloat16")
    assert OPTIONS["--kv-cache-dtype"].possible_values == ("fp8_e4m3fn", "fp8_e5m2")
    assert OPTIONS["--sharded"].possible_values == ("true", "false")
    assert OPTIONS["--usage-stats"].possible_values == ("on", "off", "no-stack")
    assert OPTIONS["--speculate"].possible_values == ()
    assert OPTIONS["--trust-remote-code"] == LauncherOption(
        "--trust-remote-code", env="TRUST_REMOTE_CODE")
    assert OPTIONS["--env"] == LauncherOption("--env", "-e")
    assert OPTIONS["--version"].short == "-V"
    # the recorded reference gives -p to both (clap derives `short` from the field name)
    assert OPTIONS["--port"].short == OPTIONS["--prometheus-port"].short == "-p"


def test_parse_a_minimal_reference() -> None:
    text = ("```shell\nUsage: text-generation-launcher [OPTIONS]\n```\n## X\n```shell\n"
            "  -x, --x-thing <X_THING>\n          Possible values:\n          - a: first\n"
            "          - b-c: second\n          \n          [env: X_THING=]\n"
            "          [default: a]\n\n```\n")
    assert parse(text) == {"--x-thing": LauncherOption("--x-thing", "-x", True, "X_THING", "a",
                                                       ("a", "b-c"))}


def test_a_good_argv() -> None:
    argv = ["--model-id", "/data/Qwen2.5-7B-Instruct", "--speculate", "3", "--num-shard", "2",
            "--hostname=0.0.0.0", "--port", "80", "--cuda-memory-fraction", "0.9",
            "--max-input-tokens", "4096", "--max-total-tokens", "8192", "--quantize", "fp8",
            "--kv-cache-dtype", "fp8_e4m3fn", "--api-key", "s3cret", "--usage-stats", "off",
            "--trust-remote-code", "--json-output", "--cors-allow-origin", "http://a",
            "--cors-allow-origin", "http://b", "-g", "30", "-e"]
    assert validate(argv, OPTIONS) == []
    assert validate([], OPTIONS) == []


@pytest.mark.parametrize(("argv", "problem"), [
    (["--model", "x"], "unknown option --model"),
    (["-m", "x"], "unknown option -m"),
    (["--model-id"], "--model-id needs a value"),
    (["--port", "--hostname", "h"], "--port needs a value"),
    (["--quantize", "int4"], "--quantize 'int4' is not one of: awq, compressed-tensors"),
    (["--dtype=float32"], "--dtype 'float32' is not one of: float16, bfloat16"),
    (["--sharded", "yes"], "--sharded 'yes' is not one of: true, false"),
    (["--port", "80", "--port", "81"], "--port given more than once"),
    (["--speculate", "2", "--speculate=3"], "--speculate given more than once"),
    (["--json-output=true"], "--json-output takes no value"),
    (["gpt2"], "unexpected argument 'gpt2'"),
    (["-p", "80"], "-p is ambiguous (--port, --prometheus-port); use the long flag"),
])
def test_bad_argv(argv: list[str], problem: str) -> None:
    problems = validate(argv, OPTIONS)
    assert len(problems) == 1
    assert problems[0].startswith(problem)


def test_every_problem_is_reported() -> None:
    problems = validate(["--model-id", "a", "--model-id", "b", "--bogus", "--dtype", "int8",
                         "--num-shard"], OPTIONS)
    assert problems == ["--model-id given more than once", "unknown option --bogus",
                        "--dtype 'int8' is not one of: float16, bfloat16",
                        "--num-shard needs a value"]
