"""Tiny random-weight Llama models for real vLLM tests on a CPU, made locally with no download.

`make_tiny_llama` writes a Hugging Face model directory (config.json, model.safetensors,
generation_config.json, tokenizer.json + tokenizer_config.json with a chat template) that
`vllm serve DIR` loads on CPU: head size 64 (hidden / heads), which vLLM's CPU attention accepts.
The tokenizer is a byte-level BPE trained in a few seconds with the `tokenizers` library on the
English text below. `make_draft_for` writes a smaller Llama sharing the identical tokenizer and
vocabulary (by default the target's first layers, so it partly agrees with the target), usable as
`{"method": "draft_model", "model": DIR}`. The target with N(0, 0.02) weights soon repeats itself
under greedy decoding, so `ngram` drafts on it too; the target as its own draft accepts 100%.

The functions run under the vLLM virtualenv's python (scripts/vllm-cpu-env), which has torch,
transformers and tokenizers; they are imported inside the functions, so this module also imports
in the project's own venv. CLI: `python tests/tinymodels.py OUT_DIR` writes OUT_DIR/target and
OUT_DIR/draft.
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

CORPUS = """\
Speculative decoding lets a small draft model propose several tokens that a large target model
then checks in a single forward pass. When the draft guesses well, the target accepts many tokens
at once and the answer arrives sooner; when it guesses badly, the extra work is wasted and the
answer arrives later. The acceptance rate depends on the prompt, the sampling temperature and how
closely the two models agree. A good tuner measures it on the machine that will serve the model.
The quick brown fox jumps over the lazy dog. The lazy dog sleeps in the warm afternoon sun while
the fox runs across the green field and into the quiet forest. Birds sing in the tall trees, and
a small stream flows past old stones toward the river and the sea.
Once upon a time there was a little town by the sea. Every morning the fishermen went out in their
boats, and every evening they came back with their nets full of fish. The children played on the
beach, built castles of sand, and watched the ships sail past on the far horizon.
def fibonacci(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

for i in range(10):
    print(i, fibonacci(i))
Please summarize the following text in one sentence. Translate this paragraph into French.
Write a short poem about the moon. Explain how a hash table works. What is the capital of France?
The capital of France is Paris. Water boils at one hundred degrees Celsius at sea level. The earth
goes around the sun once a year, and the moon goes around the earth about once a month.
Hello! How can I help you today? Thank you very much. You are welcome. Good morning, good night.
One, two, three, four, five, six, seven, eight, nine, ten. Monday, Tuesday, Wednesday, Thursday,
Friday, Saturday, Sunday. January, February, March, April, May, June, July, August, September,
October, November, December. 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 1000.
"""

BOS = "<|bos|>"
EOS = "<|end|>"
PAD = "<|pad|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (BOS, EOS, PAD, *ROLE_TOKENS)

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

HEAD_SIZE = 64
MAX_POSITIONS = 2048
INIT_STD = 0.02


def _module(name: str) -> Any:
    """Import a heavy optional dependency (torch, transformers, tokenizers) as an untyped module."""
    return importlib.import_module(name)


def train_tokenizer(out_dir: Path, vocab: int) -> Any:
    """Train a byte-level BPE on CORPUS, save it as a PreTrainedTokenizerFast; return it."""
    tk = _module("tokenizers")
    transformers = _module("transformers")
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    tokenizer.post_processor = tk.processors.ByteLevel(trim_offsets=False)
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS.splitlines(keepends=True), trainer=trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=None,
        additional_special_tokens=list(ROLE_TOKENS),
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    return fast


def _token_id(model_dir: Path, token: str) -> int:
    data = json.loads((model_dir / "tokenizer.json").read_text())
    for added in data["added_tokens"]:
        if added["content"] == token:
            return int(added["id"])
    raise KeyError(f"{token!r} not in {model_dir / 'tokenizer.json'}")


def _write_llama(
    out_dir: Path,
    *,
    vocab: int,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    seed: int,
    weights_from: Path | None = None,
) -> None:
    """Write LlamaForCausalLM weights + config for the tokenizer already in out_dir.

    Weights are random, or with `weights_from` (a model dir of the same width) that model's
    embeddings, final norm, output layer and first `layers` decoder layers.
    """
    if hidden % heads or hidden // heads != HEAD_SIZE:
        raise ValueError(f"hidden/heads must be {HEAD_SIZE} (got {hidden}/{heads})")
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    torch = _module("torch")
    transformers = _module("transformers")
    config = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 4,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=HEAD_SIZE,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=_token_id(out_dir, BOS),
        eos_token_id=_token_id(out_dir, EOS),
        pad_token_id=_token_id(out_dir, PAD),
        tie_word_embeddings=False,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config)
    # Explicit N(0, 0.02) init (Llama's initializer_range), independent of transformers' init
    # code. At this scale greedy output soon repeats itself (one token, then short cycles), so
    # ngram speculation finds matches; larger scales give non-repeating noise that ngram never
    # drafts on.
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2:
                param.normal_(0.0, INIT_STD)
    if weights_from is not None:
        source = _module("safetensors.torch").load_file(str(weights_from / "model.safetensors"))
        keep = {f"model.layers.{i}." for i in range(layers)}
        state = {
            key: value
            for key, value in source.items()
            if not key.startswith("model.layers.") or any(key.startswith(k) for k in keep)
        }
        model.load_state_dict(state, strict=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)


def make_tiny_llama(
    out_dir: Path,
    *,
    layers: int = 4,
    hidden: int = 256,
    heads: int = 4,
    kv_heads: int = 4,
    vocab: int = 512,
    seed: int = 0,
) -> Path:
    """Write a tiny random Llama with its own locally trained BPE tokenizer; return out_dir.

    `vocab` is the BPE target size; the model's vocab_size is the tokenizer's actual size (it can
    be smaller when CORPUS runs out of merges), so every id the model emits decodes.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    size = len(train_tokenizer(out_dir, vocab))
    _write_llama(
        out_dir, vocab=size, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, seed=seed
    )
    return out_dir


TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


def make_draft_for(
    target_dir: Path, out_dir: Path, *, layers: int = 2, share_weights: bool = True, seed: int = 1
) -> Path:
    """Write a smaller Llama (same width, fewer layers) sharing target_dir's tokenizer and vocab.

    With `share_weights` (default) the draft is the target truncated to its first `layers` decoder
    layers: it agrees with the target part of the time (with the 4-layer default target, a 2-layer
    draft accepted ~16% of greedy tokens and a 3-layer one ~34%, measured with transformers), which
    makes a more useful fixture than an independent random draft (0% accepted). With
    `share_weights=False` the weights are random (seeded by `seed`).
    """
    target_dir, out_dir = Path(target_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (target_dir / name).is_file():
            shutil.copy2(target_dir / name, out_dir / name)
    config = json.loads((target_dir / "config.json").read_text())
    _write_llama(
        out_dir,
        vocab=int(config["vocab_size"]),
        layers=layers,
        hidden=int(config["hidden_size"]),
        heads=int(config["num_attention_heads"]),
        kv_heads=int(config["num_key_value_heads"]),
        seed=seed,
        weights_from=target_dir if share_weights else None,
    )
    return out_dir


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tests/tinymodels.py OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    target = make_tiny_llama(out / "target")
    draft = make_draft_for(target, out / "draft")
    print(target)
    print(draft)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
