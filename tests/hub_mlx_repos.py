"""MLX repos for the stand-in Hub (tests/fake_hf_hub.py), laid out as mlx-community's are: a
config.json with the model's real dimensions and MLX's `quantization` block, the tokenizer files,
`model.safetensors.index.json`, and the weights as stub files (listed with their size, served as
zeros).

The sizes are APPROXIMATE: worked out from the parameter counts (4-bit weights packed in U32, one
BF16 scale and bias per group of 64), which give the totals the Hub shows for these repos (about
39.7 GB and 0.7 GB); the split of the 70B across files is a stand-in. The tokenizer.json is
Llama 3's shape (128,000 BPE tokens and 256 added special tokens, 128,256 in all) with stand-in
token texts, the same for both repos, as in tests/hub_repos.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fake_hf_hub import write_meta, write_stub

TARGET = "mlx-community/Meta-Llama-3.1-70B-Instruct-4bit"
DRAFT = "mlx-community/Llama-3.2-1B-Instruct-4bit"
BPE_TOKENS = 128_000
SPECIAL_TOKENS = 256
VOCAB = BPE_TOKENS + SPECIAL_TOKENS  # 128,256
BOS, EOS = 128_000, [128_001, 128_008, 128_009]
QUANT = {"group_size": 64, "bits": 4}


@dataclass(frozen=True)
class MlxRepo:
    repo: str
    params: int  # parameters of the unquantised model
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    tied: bool
    shards: int

    @property
    def packed(self) -> int:
        """4-bit weights, eight to a U32."""
        return self.params // 8

    @property
    def scales(self) -> int:
        """A BF16 scale and bias per group of 64 weights (norms are a rounding error)."""
        return self.params // 32

    @property
    def size(self) -> int:
        """Bytes of all safetensors files: U32 words and BF16 scales and biases."""
        return self.packed * 4 + self.scales * 2

    def config(self) -> dict[str, Any]:
        return {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": self.hidden, "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers, "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads, "head_dim": self.hidden // self.heads,
            "vocab_size": VOCAB, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
            "rope_theta": 500000.0, "rope_scaling": {
                "factor": 8.0 if self.layers > 16 else 32.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                "rope_type": "llama3"},
            "tie_word_embeddings": self.tied, "torch_dtype": "bfloat16",
            "bos_token_id": BOS, "eos_token_id": EOS, "hidden_act": "silu",
            "attention_bias": False, "mlp_bias": False,
            "quantization": QUANT, "quantization_config": QUANT}

    def files(self) -> list[tuple[str, int]]:
        if self.shards == 1:
            return [("model.safetensors", self.size)]
        each = self.size // self.shards
        sizes = [each] * (self.shards - 1) + [self.size - each * (self.shards - 1)]
        return [(f"model-{i:05d}-of-{self.shards:05d}.safetensors", s)
                for i, s in enumerate(sizes, 1)]


# Llama 3.1 70B: 70.55 B parameters; Llama 3.2 1B: 1.24 B (embeddings tied)
REPOS = (
    MlxRepo(TARGET, 70_553_706_496, 80, 8192, 28672, 64, 8, False, 8),
    MlxRepo(DRAFT, 1_235_814_400, 16, 2048, 8192, 32, 8, True, 1),
)


def tokenizer_json() -> str:
    vocab = {f"<l3:{i}>": i for i in range(BPE_TOKENS)}
    added = [{"id": BPE_TOKENS + i, "content": f"<|reserved_special_token_{i}|>",
              "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i in range(SPECIAL_TOKENS)]
    for i, name in ((0, "<|begin_of_text|>"), (1, "<|end_of_text|>"), (9, "<|eot_id|>")):
        added[i]["content"] = name
    return json.dumps({"version": "1.0", "added_tokens": added, "normalizer": None,
                       "pre_tokenizer": {"type": "ByteLevel"},
                       "model": {"type": "BPE", "vocab": vocab, "merges": []}})


def build(root: Path) -> Path:
    """Add the two MLX repos under `root` (the stand-in Hub's folder of repos)."""
    tokenizer = tokenizer_json()
    for spec in REPOS:
        folder = root / spec.repo
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(spec.config(), indent=2))
        (folder / "tokenizer.json").write_text(tokenizer)
        (folder / "tokenizer_config.json").write_text(json.dumps({
            "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
            "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast"}))
        (folder / "special_tokens_map.json").write_text(json.dumps({
            "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}))
        (folder / "README.md").write_text(f"# {spec.repo}\nConverted with mlx-lm (4-bit).\n")
        files = spec.files()
        (folder / "model.safetensors.index.json").write_text(json.dumps({
            "metadata": {"total_size": spec.size, "total_parameters": spec.params},
            "weight_map": {"model.embed_tokens.weight": files[0][0]}}))
        for name, size in files:
            write_stub(folder / name, size)
        write_meta(folder, safetensors={"parameters": {"U32": spec.packed,
                                                       "BF16": spec.scales},
                                        "total": spec.packed + spec.scales},
                   library_name="mlx", tags=["mlx", "safetensors", "llama"])
    return root
