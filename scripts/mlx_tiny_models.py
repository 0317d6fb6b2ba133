"""Tiny MLX-LM (Llama) models for real `mlx_lm.server` tests on a CPU, made locally, no download.

Run with the MLX virtualenv's python (scripts/mlx-cpu-env makes both):

    .venv-mlx/bin/python scripts/mlx_tiny_models.py OUT_DIR [--agree 0.75] [--seed 0] [--force]

writes, all sharing one byte-level BPE tokenizer (trained here on CORPUS with `tokenizers`):

    OUT_DIR/target        llama, hidden 256, 4 layers, 4 heads / 2 KV heads (head_dim 64), float32
    OUT_DIR/target-4bit   the target through mlx_lm.convert(quantize=True): 4 bits, group size 64,
                          bfloat16 scales: an "MLX quantised safetensors" folder as mlx-community
                          publishes them; if quantising fails, a float copy (manifest.json says so)
    OUT_DIR/draft         llama, hidden 128, 2 layers, 2 heads / 1 KV head, own weights, that agrees
                          with the target's greedy choice on about `--agree` of the tokens
    OUT_DIR/draft-copy    the target's files copied: as a draft it accepts every token
    OUT_DIR/draft-random  the draft's shape with plain N(0, 0.02) weights: it accepts almost nothing
    OUT_DIR/manifest.json what was made, settings, measured greedy agreement, sha256 of the weights

Each folder holds config.json (model_type "llama"), model.safetensors + model.safetensors.index.json
(written by mlx_lm.utils.save_model, metadata format "mlx"), tokenizer.json, tokenizer_config.json
and chat_template.jinja.

How the weights agree without training (training even these sizes takes seconds per step on
MLX's CPU backend): the decoder layers have N(0, 0.02) weights, small next to embeddings of norm
~16, so the residual stream stays close to the current token's embedding and the model is in effect
a bigram table: lm_head row v is the embedding of the token before v in a fixed cycle, so the
greedy next token is the cycle's successor of the current one. The cycle visits the non-special
tokens in the order they first occur in CORPUS, so greedy output reads like scraps of CORPUS
("Speculative decoding lets a small draft model ..."); it never reaches a special token, so the
models never stop early and a request for 32 tokens returns 32. The draft has its own random
embeddings (width 128) and follows the same cycle for a seeded `--agree` share of tokens and a
different successor for the rest. Numpy draws every weight from one seed: the files are the same
on every run (manifest.json records their sha256).

Idempotent: when OUT_DIR/manifest.json matches this script and its settings, it returns at once
(--force to rebuild). Output goes to a temporary folder that is renamed into place.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

# one corpus, tokenizer vocabulary and chat template with the vLLM tests' tiny models
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from tinymodels import BOS, CORPUS, EOS, MAX_POSITIONS, PAD, SPECIAL_TOKENS, train_tokenizer

VOCAB = 512
HEAD_DIM = 64
INIT_STD = 0.02  # decoder layers (and everything in draft-random)
EMBED_RMS = 1.0  # embedding entries: norm ~ sqrt(hidden), far above what the layers add
TOP_LOGIT = 16.0  # the successor's logit; the others are ~N(0, (TOP_LOGIT / sqrt(hidden))^2)
TARGET = {
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 768,
}
DRAFT = {
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "intermediate_size": 384,
}
QUANT_BITS, QUANT_GROUP, QUANT_DTYPE = 4, 64, "bfloat16"
QUANT: dict[str, Any] = {"bits": QUANT_BITS, "group_size": QUANT_GROUP, "dtype": QUANT_DTYPE}
FOLDERS = ("target", "target-4bit", "draft", "draft-copy", "draft-random")
PROMPT = [{"role": "user", "content": "Write a short poem about the moon."}]


def log(msg: str) -> None:
    print(f"[mlx_tiny_models] {msg}", file=sys.stderr, flush=True)


def llama_config(shape: dict[str, int], tokenizer: Any) -> dict[str, Any]:
    """A Hugging Face style LlamaForCausalLM config.json, as mlx_lm reads it."""
    ids = {tok: int(tokenizer.convert_tokens_to_ids(tok)) for tok in (BOS, EOS, PAD)}
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **shape,
        "head_dim": HEAD_DIM,
        "vocab_size": len(tokenizer),
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "hidden_act": "silu",
        "bos_token_id": ids[BOS],
        "eos_token_id": ids[EOS],
        "pad_token_id": ids[PAD],
        "torch_dtype": "float32",
    }


def successor_cycle(tokenizer: Any) -> np.ndarray:
    """succ[t]: the non-special tokens in CORPUS first-occurrence order, then the rest, as a cycle.

    Special tokens map into the cycle too (a prompt ends with one), but none is ever a successor.
    """
    special = {int(tokenizer.convert_tokens_to_ids(t)) for t in SPECIAL_TOKENS}
    seen = dict.fromkeys(tokenizer.encode(CORPUS, add_special_tokens=False))
    order = [t for t in seen if t not in special]
    order += [t for t in range(len(tokenizer)) if t not in special and t not in seen]
    succ = np.empty(len(tokenizer), dtype=np.int64)
    succ[order] = np.roll(order, -1)
    succ[sorted(special)] = order[0]
    return succ


def draft_successor(succ: np.ndarray, special: list[int], agree: float, seed: int) -> np.ndarray:
    """`succ` with another successor (never a special token) for ~(1 - agree) of the tokens."""
    rng = np.random.default_rng(seed)
    normal = np.setdiff1d(np.arange(len(succ)), special)
    out: np.ndarray = succ.copy()
    for t in np.flatnonzero(rng.random(len(succ)) >= agree):
        choices = normal[normal != succ[t]]
        out[t] = choices[rng.integers(len(choices))]
    return out


def weights(
    config: dict[str, Any], rng: np.random.Generator, succ: np.ndarray | None
) -> dict[str, mx.array]:
    """Llama weights under Hugging Face names: N(0, INIT_STD), norms 1, and with `succ` a bigram
    embedding/lm_head pair whose greedy next token is succ[current token]."""
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    model = llama.Model(llama.ModelArgs.from_dict(config))
    shapes = dict(tree_flatten(model.parameters()))
    out: dict[str, mx.array] = {}
    for name in sorted(shapes):
        shape = shapes[name].shape
        if len(shape) == 1:
            out[name] = mx.ones(shape, dtype=mx.float32)
        else:
            out[name] = mx.array(rng.normal(0.0, INIT_STD, shape).astype(np.float32))
    if succ is not None:
        vocab, hidden = shapes["model.embed_tokens.weight"].shape
        embed = rng.normal(0.0, EMBED_RMS, (vocab, hidden)).astype(np.float32)
        embed /= np.sqrt((embed**2).mean(axis=1, keepdims=True)) / EMBED_RMS
        # Row v of lm_head sums the embeddings of the tokens whose successor is v; after the
        # final RMSNorm the hidden state is ~embed[cur], so logit[succ[cur]] ~ TOP_LOGIT.
        head = np.zeros_like(embed)
        np.add.at(head, succ, embed * (TOP_LOGIT / (EMBED_RMS * EMBED_RMS * hidden)))
        out["model.embed_tokens.weight"] = mx.array(embed)
        out["lm_head.weight"] = mx.array(head)
    return out


def save_folder(
    folder: Path, params: dict[str, mx.array], config: dict[str, Any], tok_dir: Path
) -> None:
    from mlx_lm.models import llama
    from mlx_lm.utils import save_config, save_model

    model = llama.Model(llama.ModelArgs.from_dict(config))
    model.load_weights(list(params.items()), strict=True)
    save_model(folder, model)
    save_config(dict(config), folder / "config.json")
    for item in sorted(tok_dir.iterdir()):
        shutil.copy2(item, folder / item.name)


def quantise(target_dir: Path, out_dir: Path) -> dict[str, Any]:
    """mlx_lm.convert the target to 4 bits; on failure copy the float target and say why."""
    from mlx_lm import convert

    try:
        convert(
            str(target_dir),
            mlx_path=str(out_dir),
            quantize=True,
            q_bits=QUANT_BITS,
            q_group_size=QUANT_GROUP,
            dtype=QUANT_DTYPE,
        )
        return {"quantized": True, **QUANT}
    except Exception as exc:  # any failure falls back to the float copy
        log(f"quantising failed ({exc!r}); target-4bit is a float copy of the target")
        shutil.rmtree(out_dir, ignore_errors=True)
        shutil.copytree(target_dir, out_dir)
        return {"quantized": False, "error": repr(exc)}


def measure(root: Path, tokens: int = 64) -> dict[str, Any]:
    """Load every folder with mlx_lm.load; greedy text of the target; each draft's agreement.

    Agreement: the share of the target's greedy continuation of PROMPT where a draft, fed the same
    tokens, picks the same next token (what greedy speculative decoding would accept per token).
    """
    from mlx_lm import load

    target, tokenizer = load(str(root / "target"))
    prompt = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True)
    seq = list(prompt)
    for _ in range(tokens):  # no KV cache: a few dozen tiny forward passes
        seq.append(int(mx.argmax(target(mx.array([seq]))[0, -1]).item()))
    text = tokenizer.decode(seq[len(prompt) :])
    x = mx.array([seq[:-1]])
    want = mx.argmax(target(x), axis=-1)[0, len(prompt) - 1 :]
    agreement = {}
    for name in ("target-4bit", "draft", "draft-copy", "draft-random"):
        model, _ = load(str(root / name))
        got = mx.argmax(model(x), axis=-1)[0, len(prompt) - 1 :]
        agreement[name] = round(float((got == want).astype(mx.float32).mean().item()), 3)
    return {"greedy_text": text, "agreement": agreement}


def settings(agree: float, seed: int) -> dict[str, Any]:
    import mlx_lm

    return {
        "agree": agree,
        "seed": seed,
        "target": TARGET,
        "draft": DRAFT,
        "quant": QUANT,
        "mlx": mx.__version__,
        "mlx_lm": mlx_lm.__version__,
        "script_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
    }


def is_current(out: Path, wanted: dict[str, Any]) -> bool:
    try:
        manifest = json.loads((out / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("settings") != wanted:
        return False
    return all((out / name / "config.json").is_file() for name in FOLDERS)


def file_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*.safetensors"))
    }


def make(tmp: Path, agree: float, seed: int) -> dict[str, Any]:
    tok_dir = tmp / "_tokenizer"
    tokenizer = train_tokenizer(tok_dir, VOCAB)
    special = sorted(int(tokenizer.convert_tokens_to_ids(t)) for t in SPECIAL_TOKENS)
    succ = successor_cycle(tokenizer)
    target_cfg = llama_config(TARGET, tokenizer)
    draft_cfg = llama_config(DRAFT, tokenizer)
    rng = np.random.default_rng(seed)
    target = weights(target_cfg, rng, succ)
    draft = weights(draft_cfg, rng, draft_successor(succ, special, agree, seed + 1))
    random_draft = weights(draft_cfg, rng, None)

    save_folder(tmp / "target", target, target_cfg, tok_dir)
    save_folder(tmp / "draft", draft, draft_cfg, tok_dir)
    save_folder(tmp / "draft-random", random_draft, draft_cfg, tok_dir)
    shutil.rmtree(tok_dir)
    shutil.copytree(tmp / "target", tmp / "draft-copy")
    quant = quantise(tmp / "target", tmp / "target-4bit")
    facts = measure(tmp)
    log(f"vocab {len(tokenizer)}; agreement with the target's greedy tokens: {facts['agreement']}")
    log(f"target greedy text: {facts['greedy_text']!r}")
    return {"folders": list(FOLDERS), "vocab_size": len(tokenizer), "target-4bit": quant, **facts}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write the model folders into")
    parser.add_argument(
        "--agree", type=float, default=0.75, help="share of tokens where draft follows the target"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)

    out: Path = args.out.resolve()
    wanted = settings(args.agree, args.seed)
    if not args.force and is_current(out, wanted):
        log(f"ok: {out} is up to date (--force to rebuild)")
        return 0

    start = time.monotonic()
    mx.set_default_device(mx.cpu)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        facts = make(tmp, args.agree, args.seed)
        manifest = {"settings": wanted, **facts, "sha256": file_hashes(tmp)}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"done in {time.monotonic() - start:.1f} s: {out}/{{{','.join(FOLDERS)}}}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
