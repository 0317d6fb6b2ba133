"""Draft compatibility on the real testbed GGUF files, and on synthetic ModelInfo values.

The testbed files are provisioned by CI (`specctl models testbed`) before the tests run; a missing
file is a failure here, not a skip.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import pytest

from specctl.adapters.vllm import Vllm, VllmOptions
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.models import compat, testbed
from specctl.orchestrator.models.compat import identical, near
from specctl.orchestrator.models.gguf_meta import read_tokens
from specctl.orchestrator.models.info import ModelRef, from_catalog, from_gguf

KEYS = ("qwen-1.5b-q4", "qwen-0.5b-q4", "smollm2-135m", "gemma3-270m")


@pytest.fixture(scope="module")
def real() -> dict[str, ModelInfo]:
    models = Dirs.from_env().models
    return {key: from_gguf(testbed.path_of(key, models), f"testbed:{key}") for key in KEYS}


@functools.cache
def _tokens_of(path: Path) -> tuple[str, ...]:
    return tuple(read_tokens(path))


def cached_tokens(info: ModelInfo) -> list[str] | None:
    """compat.file_tokens, read once per file for the whole module (151k tokens each)."""
    return list(_tokens_of(info.path)) if info.path is not None else None


@pytest.mark.server
def test_testbed_files_are_read(real: dict[str, ModelInfo]) -> None:
    assert real["qwen-1.5b-q4"].vocab_size == 151936
    assert real["qwen-0.5b-q4"].vocab_size == 151936
    assert real["smollm2-135m"].vocab_size == 49152
    assert real["gemma3-270m"].vocab_size == 262144
    assert real["qwen-1.5b-q4"].vocab_type == "bpe"
    assert real["gemma3-270m"].vocab_type == "spm"
    assert all(info.source == "file" for info in real.values())


@pytest.mark.server
def test_qwen_pair_is_compatible_under_near(real: dict[str, ModelInfo]) -> None:
    # the default token reader, for real
    assert near(real["qwen-1.5b-q4"], real["qwen-0.5b-q4"]) is None


@pytest.mark.server
def test_qwen_pair_is_compatible_under_identical(real: dict[str, ModelInfo]) -> None:
    assert identical(real["qwen-1.5b-q4"], real["qwen-0.5b-q4"], cached_tokens) is None


@pytest.mark.server
def test_qwen_token_lists_really_match(real: dict[str, ModelInfo]) -> None:
    big, small = cached_tokens(real["qwen-1.5b-q4"]), cached_tokens(real["qwen-0.5b-q4"])
    assert big is not None and small is not None
    assert len(big) == len(small) == 151936
    assert big == small


@pytest.mark.server
@pytest.mark.parametrize("rule", ["near", "identical"])
def test_smollm2_is_rejected_for_vocab_size(rule: str, real: dict[str, ModelInfo]) -> None:
    reason = compat.RULES[rule](real["qwen-1.5b-q4"], real["smollm2-135m"], cached_tokens,
                                False)
    assert reason is not None
    assert "vocab sizes differ" in reason
    assert "151936" in reason and "49152" in reason


@pytest.mark.server
def test_smollm2_near_reason(real: dict[str, ModelInfo]) -> None:
    reason = near(real["qwen-1.5b-q4"], real["smollm2-135m"], cached_tokens)
    assert reason is not None
    assert "vocab sizes differ by 102784" in reason


@pytest.mark.server
def test_gemma3_is_rejected_for_vocab_type(real: dict[str, ModelInfo]) -> None:
    reason = near(real["qwen-1.5b-q4"], real["gemma3-270m"], cached_tokens)
    assert reason is not None
    assert "vocab type differs" in reason
    assert "BPE" in reason and "SPM" in reason


@pytest.mark.server
def test_heterogeneous_vocab_lets_vllm_accept_any_draft(real: dict[str, ModelInfo]) -> None:
    assert identical(real["qwen-1.5b-q4"], real["smollm2-135m"], cached_tokens,
                     heterogeneous=True) is None


# --- synthetic ModelInfo ---------------------------------------------------------------------

BASE = ModelInfo(
    ref="hf:org/target", name="target", path=Path("/nonexistent/target.gguf"),
    architecture="llama", layers=4, heads=8, kv_heads=2, head_dim=64, vocab_size=10,
    vocab_type="bpe", tokenizer="gguf:gpt2/default", params_b=None, quant="Q4_K_M",
    size_bytes=1000, bos_id=1, eos_id=2, add_bos=False, source="file",
)
TOKENS = [f"t{i}" for i in range(10)]


def _tokens_by_name(lists: dict[str, list[str]]) -> compat.Tokens:
    return lambda info: lists[info.name]


def test_token_text_differing_at_id_7() -> None:
    draft = replace(BASE, name="draft", ref="hf:org/draft")
    other = [*TOKENS[:7], "changed", *TOKENS[8:]]
    reason = near(BASE, draft, _tokens_by_name({"target": TOKENS, "draft": other}))
    assert reason is not None
    assert reason.startswith("token 7 differs")
    assert "'t7'" in reason and "'changed'" in reason


def test_token_text_differing_below_id_5_is_ignored() -> None:
    draft = replace(BASE, name="draft")
    other = ["x0", "x1", "x2", "x3", "x4", *TOKENS[5:]]
    assert near(BASE, draft, _tokens_by_name({"target": TOKENS, "draft": other})) is None


def test_equal_tokens_are_compatible() -> None:
    draft = replace(BASE, name="draft")
    assert near(BASE, draft, _tokens_by_name({"target": TOKENS, "draft": list(TOKENS)})) is None


def test_shorter_draft_within_128_compares_the_common_ids() -> None:
    draft = replace(BASE, name="draft", vocab_size=8)
    assert near(BASE, draft, _tokens_by_name({"target": TOKENS, "draft": TOKENS[:8]})) is None


def test_bos_id_mismatch() -> None:
    target = replace(BASE, add_bos=True, bos_id=1)
    draft = replace(BASE, name="draft", add_bos=True, bos_id=0)
    reason = near(target, draft, lambda _m: None)
    assert reason is not None
    assert "BOS handling differs" in reason


def test_add_bos_mismatch() -> None:
    draft = replace(BASE, name="draft", add_bos=True)
    reason = near(BASE, draft, lambda _m: None)
    assert reason is not None and "BOS handling differs" in reason


def test_bos_id_ignored_when_neither_adds_bos() -> None:
    draft = replace(BASE, name="draft", bos_id=99)
    assert near(BASE, draft, lambda _m: None) is None


def test_spm_adds_bos_by_default() -> None:
    target = replace(BASE, vocab_type="spm", add_bos=None)
    draft = replace(BASE, name="draft", vocab_type="spm", add_bos=False)
    reason = near(target, draft, lambda _m: None)
    assert reason is not None and "add_bos=True" in reason


def test_eos_mismatch_when_added() -> None:
    target = replace(BASE, add_eos=True, eos_id=2)
    draft = replace(BASE, name="draft", add_eos=True, eos_id=3)
    reason = near(target, draft, lambda _m: None)
    assert reason is not None and "EOS handling differs" in reason


def test_without_token_lists_the_tokenizer_names_decide() -> None:
    draft = replace(BASE, name="draft", tokenizer="gguf:gpt2/other")
    reason = near(BASE, draft, lambda _m: None)
    assert reason is not None and "tokenizers differ" in reason


@pytest.fixture
def qwen_32b_and_05b() -> tuple[ModelInfo, ModelInfo]:
    target = from_catalog(ModelRef("hf", "bartowski/Qwen2.5-Coder-32B-Instruct-GGUF", "Q4_K_M"),
                          "Q4_K_M")
    draft = from_catalog(ModelRef("hf", "bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF", "Q8_0"),
                         "Q4_K_M")
    assert target is not None and draft is not None
    return target, draft


def test_catalog_qwen_32b_and_05b_are_near_compatible(
        qwen_32b_and_05b: tuple[ModelInfo, ModelInfo]) -> None:
    target, draft = qwen_32b_and_05b
    assert (target.vocab_size, draft.vocab_size) == (152064, 151936)
    assert near(target, draft) is None  # catalog models: no files, no token lists


def test_catalog_qwen_32b_and_05b_are_not_identical(
        qwen_32b_and_05b: tuple[ModelInfo, ModelInfo]) -> None:
    reason = identical(*qwen_32b_and_05b)
    assert reason is not None
    assert "vocab sizes differ (target 152064, draft 151936)" in reason
    assert identical(*qwen_32b_and_05b, heterogeneous=True) is None
    hint = Vllm().draft_problem(VllmOptions(), *qwen_32b_and_05b, compat.vocab)
    assert hint is not None and "[vllm] heterogeneous_vocab = true" in hint  # what to do
    assert Vllm().draft_problem(VllmOptions(heterogeneous_vocab=True), *qwen_32b_and_05b,
                               compat.vocab) is None


def test_catalog_llama_and_qwen_tokenizers_differ() -> None:
    llama = from_catalog(ModelRef("hf", "meta-llama/Llama-3.1-8B-Instruct"), "BF16")
    distill = from_catalog(ModelRef("hf", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"), "BF16")
    assert llama is not None and distill is not None
    reason = near(llama, distill)
    assert reason is not None and "tokenizers differ" in reason
