"""Can this draft speculate for this target? The backends' own rules, checked on the files.

"near" is llama.cpp's rule (common/speculative.cpp): same vocab type, same BOS/EOS handling,
vocab sizes within 128, token texts equal from id 5 on. "identical" is vLLM's: the same vocabulary
(unless heterogeneous vocab is turned on). Each returns None when compatible, else the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.models import hf_meta
from specctl.orchestrator.models.gguf_meta import read_tokens, token_bytes

MAX_VOCAB_DIFF = 128
CHECK_FROM_ID = 5
DEFAULT_ADD_BOS = {"spm": True, "wpm": True}
Tokens = Callable[[ModelInfo], list[str] | None]


def file_tokens(info: ModelInfo) -> list[str] | None:
    """The token texts, from the model file or folder, or from its metadata read off the Hub."""
    where = info.path or info.meta_file
    if where is None or not where.exists():  # a test model not fetched yet: catalog tokenizers
        return None
    if where.is_dir():
        return hf_meta.read_tokens(where) if (where / "tokenizer.json").is_file() else None
    return read_tokens(where)


def _gguf(info: ModelInfo) -> Path | None:
    where = info.path or info.meta_file
    return where if where is not None and where.is_file() else None


def same_gguf_tokens(target: ModelInfo, draft: ModelInfo, first: int) -> bool:
    """Both vocabularies in GGUF headers and their tokens from `first` on the same (over the
    shorter): compared as stored bytes, which is what a warm `plan` can afford."""
    a, b = _gguf(target), _gguf(draft)
    if a is None or b is None:
        return False
    upto = min(target.vocab_size, draft.vocab_size)
    left, right = token_bytes(a, first, upto), token_bytes(b, first, upto)
    return left is not None and left == right


def _add_bos(m: ModelInfo) -> bool:
    return m.add_bos if m.add_bos is not None else DEFAULT_ADD_BOS.get(m.vocab_type, False)


def near(target: ModelInfo, draft: ModelInfo, tokens: Tokens = file_tokens,
         heterogeneous: bool = False) -> str | None:
    if target.vocab_type != draft.vocab_type:
        return (f"vocab type differs: target {target.vocab_type.upper()}, draft "
                f"{draft.vocab_type.upper()} (the near rule needs the same tokenizer type)")
    if _add_bos(target) != _add_bos(draft) or (_add_bos(target) and target.bos_id != draft.bos_id):
        return (f"BOS handling differs: target add_bos={_add_bos(target)} id={target.bos_id}, "
                f"draft add_bos={_add_bos(draft)} id={draft.bos_id}")
    if bool(target.add_eos) != bool(draft.add_eos) or (target.add_eos and
                                                        target.eos_id != draft.eos_id):
        return f"EOS handling differs: target id={target.eos_id}, draft id={draft.eos_id}"
    diff = abs(target.vocab_size - draft.vocab_size)
    if diff > MAX_VOCAB_DIFF:
        return (f"vocab sizes differ by {diff} (target {target.vocab_size}, draft "
                f"{draft.vocab_size}; the near rule allows {MAX_VOCAB_DIFF})")
    if same_gguf_tokens(target, draft, CHECK_FROM_ID):
        return None
    tt, dt = tokens(target), tokens(draft)
    if tt is not None and dt is not None:
        for i in range(CHECK_FROM_ID, min(len(tt), len(dt))):
            if tt[i] != dt[i]:
                return f"token {i} differs: target {tt[i]!r}, draft {dt[i]!r}"
    elif (target.tokenizer != draft.tokenizer if target.source == draft.source
          else target.family != draft.family):
        return f"tokenizers differ: target {target.tokenizer}, draft {draft.tokenizer}"
    return None


def identical(target: ModelInfo, draft: ModelInfo, tokens: Tokens = file_tokens,
              heterogeneous: bool = False) -> str | None:
    if heterogeneous:
        return None
    if target.vocab_size != draft.vocab_size:
        return (f"vocab sizes differ (target {target.vocab_size}, draft {draft.vocab_size}); "
                "the backend needs identical vocabularies")
    return near(target, draft, tokens)


RULES: dict[str, Callable[[ModelInfo, ModelInfo, Tokens, bool], str | None]] = {
    "near": near, "identical": identical}


def vocab(rule: str, target: ModelInfo, draft: ModelInfo, relaxed: bool = False) -> str | None:
    """Why `draft`'s vocabulary cannot serve `target`'s under a backend's rule ("near" or
    "identical"; `relaxed`: the backend maps differing vocabularies), or None: the check the
    planner hands to Adapter.draft_problem (contract.adapter.VocabCheck)."""
    return RULES[rule](target, draft, file_tokens, relaxed)
