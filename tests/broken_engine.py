"""BROKEN llama-server builds, on purpose: wrappers around the real `llama-server` that break
speculative decoding the way a bad engine build could, to check that specctl's checks catch them.

They run the real binary (REAL_LLAMA_SERVER) with a rewritten command line, and only when the
command line asks for speculation (a draft model, `-md`); otherwise (the baseline, `--help`,
`--version`) they pass it through unchanged, so the broken build probes like the real one.

* `draft-alone` (tests/bin/broken-spec-llama-server): serves the DRAFT model alone in place of
  the target and drafts nothing. Greedy output diverges early, the sampled distribution is the
  draft's, the draft counters stay at zero; the floor (drafts always rejected) is broken too.
* `top-k` (tests/bin/perturbed-sampler-llama-server): speculates for real (counters move) but
  with the server's default top-k cut to 1 (requests that name no top-k get it): greedy output
  is unchanged, every sample is the greedy reply. Only a sampling test can see it. (top-k 2 was
  too small a change to see on SmolLM2-135M: p=0.31 with 12 samples per prompt and side.)
* `no-draft` (tests/bin/no-draft-llama-server): serves the target correctly but drops the draft:
  the output is the target's, nothing is drafted; its speed is no speculation speedup.

Run as `python3 broken_engine.py MODE ARGS...` (the shims in tests/bin do).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

DRAFT_MODEL = ("-md", "--model-draft", "--spec-draft-model")
# flags that only mean something with a draft; each takes one value
SPEC_FLAGS = ("-ngld", "--gpu-layers-draft", "-devd", "--device-draft", "-ctkd", "-ctvd",
              "--spec-type", "--spec-draft-n-max", "--spec-draft-n-min", "--spec-draft-p-min",
              "--spec-draft-type-k", "--spec-draft-type-v", "--spec-synth-rates",
              "--draft-max", "--draft-min", "--draft-p-min", *DRAFT_MODEL)
MODES = ("draft-alone", "top-k", "no-draft")


def value_of(argv: Sequence[str], names: Sequence[str]) -> str | None:
    for i, arg in enumerate(argv[:-1]):
        if arg in names:
            return argv[i + 1]
    return None


def without_speculation(argv: Sequence[str]) -> list[str]:
    """argv with every draft flag (and its value) dropped."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in SPEC_FLAGS:
            skip = True
        else:
            out.append(arg)
    return out


def rewrite(mode: str, argv: Sequence[str]) -> list[str]:
    """The arguments the broken build really runs the server with."""
    if mode not in MODES:
        raise SystemExit(f"broken_engine: mode is one of {', '.join(MODES)}, not {mode!r}")
    draft = value_of(argv, DRAFT_MODEL)
    if draft is None:  # not asked to speculate: behave
        return list(argv)
    if mode == "top-k":
        return [*argv, "--top-k", "1"]
    out = without_speculation(argv)
    if mode == "draft-alone":
        out = [draft if i > 0 and out[i - 1] in ("-m", "--model") else a
               for i, a in enumerate(out)]
    return out


def main(args: Sequence[str]) -> None:
    if not args:
        raise SystemExit("usage: broken_engine.py MODE ARGS...")
    real = os.environ.get("REAL_LLAMA_SERVER")
    if not real:
        raise SystemExit("broken_engine: set REAL_LLAMA_SERVER to the real llama-server")
    argv = rewrite(args[0], args[1:])
    os.execv(real, [real, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
