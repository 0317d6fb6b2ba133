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
* `tool-call` (tests/bin/tool-call-llama-server): speculates for real, with a relay in front of
  it (tests/broken_tools.py) that alters the first tool call of each answer (one argument cut
  by a character, or the tool renamed). Chat text, greedy or sampled, is the target's; only a
  check of tool calls sees it. It counts as speculating with any --spec-type but none (n-gram
  methods have no -md), and its fault is in what accepted drafts do: the floor, which accepts
  none (`--spec-synth-rates`), is served unaltered.

Run as `python3 broken_engine.py MODE ARGS...` (the shims in tests/bin do).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

DRAFT_MODEL = ("-md", "--model-draft", "--spec-draft-model")
# flags that only mean something with a draft; each takes one value
SPEC_FLAGS = ("-ngld", "--gpu-layers-draft", "-devd", "--device-draft", "-ctkd", "-ctvd",
              "--spec-type", "--spec-draft-n-max", "--spec-draft-n-min", "--spec-draft-p-min",
              "--spec-draft-type-k", "--spec-draft-type-v", "--spec-synth-rates",
              "--draft-max", "--draft-min", "--draft-p-min", *DRAFT_MODEL)
MODES = ("draft-alone", "top-k", "no-draft", "tool-call")


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
    if mode == "tool-call" or draft is None:  # tool-call: the relay breaks it, not argv
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
    port = value_of(argv, ("--port",))
    if args[0] == "tool-call" and speculates(argv) and port is not None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests import broken_tools

        broken_tools.serve(real, argv, value_of(argv, ("--host",)) or "127.0.0.1", int(port))
        return
    os.execv(real, [real, *argv])


def speculates(argv: Sequence[str]) -> bool:
    """A draft model, or a --spec-type other than none, and drafts that may be accepted (not
    the floor's `--spec-synth-rates`)."""
    kind = value_of(argv, ("--spec-type",))
    return (value_of(argv, DRAFT_MODEL) is not None or kind not in (None, "none")) and \
        "--spec-synth-rates" not in argv


if __name__ == "__main__":
    main(sys.argv[1:])
