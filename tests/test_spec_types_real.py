"""Every n-gram method and a chain, served for real: the cpu-demo pair (Qwen2.5-Coder-1.5B F16
target, 0.5B Q4_K_M draft) on a real llama-server, asked to copy a function with one change;
the server's own draft counters (/metrics) must show drafts made and accepted. And the argv of
every spec type passes the installed llama-server's own argument parser.

Needs the provisioned build and models (`specctl backend install llamacpp`,
`specctl models testbed`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from specctl.adapters.llamacpp import LlamaCpp
from specctl.orchestrator.app import App, Resolved
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.plan import NGRAMS, Plan, Step
from specctl.orchestrator.measure.lab import engine
from specctl.orchestrator.measure.lab.servers import ServerLab
from specctl.orchestrator.measure.prompts.workload import Prompt, Workload
from specctl.orchestrator.planning.planner import DEFAULT_K
from tests import plans

pytestmark = pytest.mark.server

# the reply copies the function: n-gram drafters find their n-grams in the prompt
COPY = ("Repeat this Python function exactly, but rename `lst` to `items`. Reply with only the "
        "code.\n\n```python\ndef chunked(lst, size):\n    \"\"\"Split lst into consecutive "
        "chunks of at most size elements.\"\"\"\n    if size <= 0:\n        raise ValueError("
        "'size must be positive')\n    out = []\n    for start in range(0, len(lst), size):\n"
        "        out.append(lst[start:start + size])\n    return out\n```")


@pytest.fixture(scope="module")
def demo() -> Resolved:
    resolved = App.from_env().resolve("cpu-demo", use_tuned=False)
    if resolved.installed.assumed:
        pytest.fail("llama.cpp is not installed here: `specctl backend install llamacpp`")
    return resolved


def drafted_and_accepted(demo: Resolved, plan: Plan, logs: Path) -> tuple[int, int]:
    with engine.serve(plan, demo.backend, demo.installed, logs, "spec-" + plan.short()) as srv:
        got = srv.ask(COPY, 96)
    assert got.reply.tokens > 20, got.reply.text
    return got.spec.drafted, got.spec.accepted


@pytest.mark.parametrize("method", sorted(NGRAMS - {"ngram-cache"}))
def test_each_ngram_method_drafts_and_is_accepted_on_a_copy(demo: Resolved, method: str,
                                                            tmp_path: Path) -> None:
    plan = demo.plan.but(method=method, draft=None, k=DEFAULT_K[method], p_min=None)
    drafted, accepted = drafted_and_accepted(demo, plan, tmp_path)
    assert drafted > 0 and accepted > 0, (method, drafted, accepted)


def test_ngram_cache_serves(demo: Resolved, tmp_path: Path) -> None:
    """ngram-cache drafts from a cache of n-grams it has seen (no static cache here): it
    starts, serves, and its counters are read; whether it drafts on a first request is the
    engine's business."""
    plan = demo.plan.but(method="ngram-cache", draft=None, k=8, p_min=None)
    drafted, accepted = drafted_and_accepted(demo, plan, tmp_path)
    assert 0 <= accepted <= drafted


def test_the_draft_chained_with_ngram_mod_drafts_and_is_accepted(demo: Resolved,
                                                                  tmp_path: Path) -> None:
    plan = demo.plan.but(method="draft", k=4, chain=(Step("ngram-mod", 16),))
    assert "--spec-type" in (argv := demo.backend.launch(plan, demo.installed).argv)
    assert argv[argv.index("--spec-type") + 1] == "draft-simple,ngram-mod"
    drafted, accepted = drafted_and_accepted(demo, plan, tmp_path)
    assert drafted > 0 and accepted > 0


def test_every_spec_types_argv_passes_the_installed_parser() -> None:
    """llama-server parses every argument before `--help` prints and exits 0; a flag or
    --spec-type value it does not know is an error (exit 1). No model is loaded."""
    installed = LlamaCpp.create(Dirs.from_env()).probe()
    assert installed is not None and installed.path is not None, "install llama.cpp first"
    assert installed.chains and "ngram-mod" in installed.methods  # read from its own --help
    head = plans.draft(kind="eagle3")
    variants = [plans.plan(method=m, draft=None, k=DEFAULT_K[m]) for m in sorted(NGRAMS)]
    variants += [plans.plan(method="mtp", draft=None, k=2),
                 plans.plan(k=4, chain=(Step("ngram-mod", 16), Step("ngram-map-k4v", 8))),
                 *(plans.plan(method=m, draft=head, k=6) for m in ("eagle3", "dflash",
                                                                    "dspark")),
                 # MTP from a sidecar on the Hub (-hf, -hfd: nothing is downloaded to parse)
                 plans.plan(method="mtp", k=2,
                            target=plans.target(ref="hf:org/Model-GGUF:Q4_K_M", path=None),
                            draft=plans.draft(ref="hf:org/Model-GGUF:MTP", path=None))]
    for plan in variants:
        argv = list(LlamaCpp().launch(plan, installed).argv)
        done = subprocess.run([installed.path, *argv[1:], "--help"], capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, (plan.short(), done.stderr[-400:])
    bad = subprocess.run([installed.path, "--spec-type", "draft-simple,warp", "--help"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode != 0  # the check can fail


def test_a_tiny_mtp_model_is_planned_with_mtp_and_its_drafts_are_accepted(
        tmp_path: Path) -> None:
    """tests/tiny_mtp_gguf.py: a `qwen35` model with one MTP block, written here. draft =
    "auto" finds the MTP layer in its GGUF and picks it; llama-server drafts with it
    (`--spec-type draft-mtp`, no draft file) and accepts (the model repeats its last token and
    its MTP block predicts the same)."""
    from tests import tiny_mtp_gguf

    model = tiny_mtp_gguf.write(tmp_path / "tiny-qwen35-mtp.gguf")
    profile = tmp_path / "mtp.toml"
    profile.write_text(f'target = "{model}"\ndraft = "auto"\nbackend = ["llamacpp"]\n'
                       '[server]\ncontext = 2048\n')
    resolved = App.from_env().resolve(str(profile), use_tuned=False)
    plan = resolved.plan
    assert plan.method == "mtp" and plan.draft is None, plan.reasons
    assert any("MTP layer(s) (GGUF nextn_predict_layers)" in r for r in plan.reasons)
    argv = resolved.launch().argv
    assert argv[argv.index("--spec-type") + 1] == "draft-mtp" and "-md" not in argv
    with engine.serve(plan.but(k=3), resolved.backend, resolved.installed, tmp_path,
                      "mtp") as srv:
        got = srv.ask("Say something.", 32)
    assert got.reply.tokens > 8
    assert got.spec.drafted > 0 and got.spec.accepted > 0, got.spec


class Forgetful(LlamaCpp):
    """The real adapter with its `remembers` switched off: what measuring was before."""

    def remembers(self, plan: Plan) -> bool:
        return False


@pytest.mark.parametrize("restart", [True, False])
def test_a_server_whose_ngram_pool_outlives_a_request_is_restarted_before_a_repeat(
        demo: Resolved, tmp_path: Path, restart: bool) -> None:
    """ngram-mod keeps its n-gram pool for the server's life: asked the same prompt again, it
    drafts the reply it gave the first time. bench and tune repeat their prompts, so the lab
    restarts such a server before a repeat: the second answer drafts exactly what the first did
    (temperature 0, a fresh pool). The control (restarts off) shows the memory is real."""
    plan = demo.plan.but(method="ngram-mod", draft=None, k=16, p_min=None)
    backend = demo.backend if restart else Forgetful.create(Dirs.from_env())
    assert backend.remembers(plan) is restart
    work = Workload((Prompt("chat", "Give three short tips for sleeping well."),))
    room = ServerLab(backend, demo.installed, work, tmp_path, lambda _m: None)
    try:
        room.keep([("mod", plan)])
        first, again = room.ask("mod", 0, 48), room.ask("mod", 0, 48)
    finally:
        room.close()
    assert first.text == again.text and first.tokens > 20
    if restart:
        assert room.restarts == 1
        assert (again.spec.drafted, again.spec.accepted) == (first.spec.drafted,
                                                             first.spec.accepted)
    else:
        assert room.restarts == 0
        # from memory: at least one whole draft (16) more than a fresh pool accepts
        assert again.spec.accepted >= first.spec.accepted + 16, (first.spec, again.spec)
