"""llama.cpp: every --spec-type the recorded build lists, one at a time and chained, each with its
own knobs; argv checked against the build's flags (and, in test_llamacpp_flagcheck.py, by the
installed llama-server itself)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from specctl.adapters.llamacpp import LlamaCpp, LlamaCppOptions
from specctl.adapters.llamacpp_dialect import METHOD_OF, SPEC_TYPES, parse_help
from specctl.orchestrator.contract.launch import Installed
from specctl.orchestrator.contract.plan import NGRAMS, Plan, Step
from specctl.orchestrator.errors import BackendError
from tests import plans
from tests.test_llamacpp_adapter import LEGACY_HELP, real_help


def pairs(argv: tuple[str, ...]) -> set[tuple[str, str]]:
    return set(itertools.pairwise(argv))


def flags_known(argv: tuple[str, ...], installed: Installed) -> bool:
    return all(a in installed.flags for a in argv if a.startswith("-") and not a[1:].isdigit())


@pytest.fixture
def installed() -> Installed:
    return LlamaCpp().assumed()


def test_the_build_lists_every_type_and_takes_a_list() -> None:
    parsed = parse_help(real_help())
    assert parsed.spec_types == {"none", *SPEC_TYPES.values()}
    assert parsed.chains
    assert not parse_help(LEGACY_HELP).chains
    assert LlamaCpp().assumed().methods == {"none", *METHOD_OF.values()}


@pytest.mark.parametrize("method", sorted(NGRAMS))
def test_each_ngram_method_alone(installed: Installed, method: str) -> None:
    plan = plans.plan(method=method, draft=None, k=12, ngram_max=3)
    argv = LlamaCpp().launch(plan, installed).argv
    got = pairs(argv)
    assert ("--spec-type", SPEC_TYPES[method]) in got
    assert "-md" not in argv and "--spec-draft-n-max" not in argv
    assert flags_known(argv, installed)
    if method == "ngram-mod":
        assert ("--spec-ngram-mod-n-max", "12") in got
        assert ("--spec-ngram-mod-n-min", "4") in got  # not the build's 48
        assert ("--spec-ngram-mod-n-match", "8") in got  # nor its lookup of 24
    elif method == "ngram-cache":
        assert not any(a.startswith("--spec-ngram") for a in argv)  # it has no knobs
    else:
        kind = {"ngram": "simple", "ngram-map-k": "map-k", "ngram-map-k4v": "map-k4v"}[method]
        assert (f"--spec-ngram-{kind}-size-n", "3") in got
        assert (f"--spec-ngram-{kind}-size-m", "12") in got


def test_ngram_mod_at_the_builds_own_length_takes_its_own_knobs(installed: Installed) -> None:
    """k=64 is llama-server's `--spec-default` (n-match 24, n-min 48, n-max 64): whole files
    copied back; a profile's knobs still win."""
    got = pairs(LlamaCpp().launch(plans.plan(method="ngram-mod", draft=None, k=64),
                                  installed).argv)
    assert {("--spec-ngram-mod-n-max", "64"), ("--spec-ngram-mod-n-min", "48"),
            ("--spec-ngram-mod-n-match", "24")} <= got
    chained = pairs(LlamaCpp().launch(plans.plan(k=3, chain=(Step("ngram-mod", 96),)),
                                      installed).argv)
    assert {("--spec-ngram-mod-n-max", "96"), ("--spec-ngram-mod-n-min", "48")} <= chained
    opts = LlamaCppOptions(ngram_mod_n_match=12)
    mine = pairs(LlamaCpp().launch(plans.plan(method="ngram-mod", draft=None, k=64,
                                              options=opts), installed).argv)
    assert {("--spec-ngram-mod-n-match", "12"), ("--spec-ngram-mod-n-min", "48")} <= mine


def test_each_type_has_its_own_knobs(installed: Installed) -> None:
    opts = LlamaCppOptions(ngram_mod_n_match=16, ngram_mod_n_min=2, ngram_min_hits=2)
    mod = pairs(LlamaCpp().launch(plans.plan(method="ngram-mod", draft=None, k=8,
                                             options=opts), installed).argv)
    assert {("--spec-ngram-mod-n-match", "16"), ("--spec-ngram-mod-n-min", "2")} <= mod
    mapk = pairs(LlamaCpp().launch(plans.plan(method="ngram-map-k4v", draft=None, k=8,
                                              options=opts), installed).argv)
    assert ("--spec-ngram-map-k4v-min-hits", "2") in mapk


def test_a_chain_of_the_draft_and_ngram_mod(installed: Installed) -> None:
    plan = plans.plan(k=4, chain=(Step("ngram-mod", 16),))
    argv = LlamaCpp().launch(plan, installed).argv
    got = pairs(argv)
    assert ("--spec-type", "draft-simple,ngram-mod") in got
    assert ("--spec-draft-n-max", "4") in got  # the draft's own k
    assert ("--spec-ngram-mod-n-max", "16") in got  # and ngram-mod's
    assert plan.draft is not None and ("-md", str(plan.draft.path)) in got
    assert flags_known(argv, installed)
    assert plan.short() == "draft k=4 + ngram-mod k=16"
    assert plan.methods == ("draft", "ngram-mod")
    assert "+ ngram-mod k=16" in plan.describe_spec()
    assert not plan.baseline().chain


def test_a_chain_of_two_ngram_methods(installed: Installed) -> None:
    plan = plans.plan(method="ngram-mod", draft=None, k=16, chain=(Step("ngram-map-k", 8),))
    got = pairs(LlamaCpp().launch(plan, installed).argv)
    assert ("--spec-type", "ngram-mod,ngram-map-k") in got
    assert ("--spec-ngram-map-k-size-m", "8") in got


@pytest.mark.parametrize("method", ["eagle3", "dflash", "dspark"])
def test_heads_load_with_md(installed: Installed, method: str) -> None:
    head = plans.draft(ref="hf:org/Head-GGUF:Q8_0", path=None, kind=method)
    argv = LlamaCpp().launch(plans.plan(method=method, draft=head, k=6), installed).argv
    got = pairs(argv)
    assert ("--spec-type", SPEC_TYPES[method]) in got
    assert ("-hfd", "org/Head-GGUF:Q8_0") in got
    assert ("--spec-draft-n-max", "6") in got
    with pytest.raises(BackendError, match="needs a draft file"):
        LlamaCpp().launch(plans.plan(method=method, draft=None, k=6), installed)


def test_mtp_uses_the_targets_own_layers(installed: Installed) -> None:
    plan = plans.plan(method="mtp", draft=None, k=2, chain=(Step("ngram-mod", 16),))
    argv = LlamaCpp().launch(plan, installed).argv
    got = pairs(argv)
    assert ("--spec-type", "draft-mtp,ngram-mod") in got
    assert ("--spec-draft-n-max", "2") in got
    assert "-md" not in argv and "-hfd" not in argv
    assert flags_known(argv, installed)


def test_what_the_engine_cannot_chain_is_refused(installed: Installed) -> None:
    two_models = plans.plan(method="draft", k=4, chain=(Step("mtp", 1),))
    with pytest.raises(BackendError, match="one drafting model"):
        LlamaCpp().launch(two_models, installed)
    twice = plans.plan(method="ngram-mod", draft=None, k=4, chain=(Step("ngram-mod", 8),))
    with pytest.raises(BackendError, match="each once"):
        LlamaCpp().launch(twice, installed)
    single = Installed(**{**installed.__dict__, "chains": False})
    with pytest.raises(BackendError, match="one --spec-type at a time"):
        LlamaCpp().launch(plans.plan(chain=(Step("ngram-mod", 16),)), single)
    no_mod = Installed(**{**installed.__dict__, "methods": installed.methods - {"ngram-mod"}})
    with pytest.raises(BackendError, match="cannot do 'ngram-mod'"):
        LlamaCpp().launch(plans.plan(chain=(Step("ngram-mod", 16),)), no_mod)


def test_a_single_method_plan_is_as_before(installed: Installed) -> None:
    plan: Plan = plans.plan(k=3)
    assert plan.methods == ("draft",) and plan.short() == "draft k=3"
    got = pairs(LlamaCpp().launch(plan, installed).argv)
    assert ("--spec-type", "draft-simple") in got


# --- from the profile, through the planner ----------------------------------------------------


def test_a_profile_chain_and_ngram_mod_reach_the_plan(tmp_path: Path) -> None:
    from tests.test_planner import MAC, mac_profile, plan_for

    chained, installed = plan_for(mac_profile(k=4, speculative={"chain": ["ngram-mod"]}), MAC,
                                  tmp_path)
    assert chained.methods == ("draft", "ngram-mod") and chained.chain == (Step("ngram-mod", 16),)
    assert "+ ngram-mod k=16" in chained.reasons[-1]
    got = pairs(LlamaCpp().launch(chained, installed).argv)
    assert ("--spec-type", "draft-simple,ngram-mod") in got
    mod, _ = plan_for(mac_profile(draft="ngram-mod"), MAC, tmp_path)
    assert (mod.method, mod.draft, mod.k) == ("ngram-mod", None, 16)


def test_a_chain_on_a_backend_that_takes_one_method_is_left_out_with_the_reason(
        tmp_path: Path) -> None:
    from tests.test_planner import plan_for

    data = {"target": "hf:hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
            "draft": "hf:meta-llama/Llama-3.2-1B-Instruct", "backend": ["vllm"], "k": 4,
            "speculative": {"chain": ["ngram-mod"]}}
    plan, _ = plan_for(data, "linux_1x_h100_80g", tmp_path)
    assert plan.chain == () and any("Chain ngram-mod left out" in r for r in plan.reasons)
