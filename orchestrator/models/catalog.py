"""Well-known models, so plans work for models not on disk (sizes from the models' config.json).

`vocab` is the embedding size; `tokenizer` names the token list, so two entries with the same
tokenizer and vocab are identical vocabularies (vLLM's rule) and llama.cpp-compatible.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Known:
    name: str
    family: str
    architecture: str
    params_b: float
    layers: int
    kv_heads: int
    head_dim: int
    heads: int
    vocab: int
    tokenizer: str
    vocab_type: str = "bpe"
    kind: str = "model"  # "model", "eagle3" (a head for its target), "mtp" (built-in heads)
    context: int = 131072
    expert_share: float = 0.0  # MoE: share of the weights in experts (total - active math)
    spec_heads: int = 0  # built-in speculative heads (Medusa heads, MTP layers)


CATALOG: tuple[Known, ...] = (
    Known("Llama-3.1-70B-Instruct", "llama3", "llama", 70.55, 80, 8, 128, 64, 128256, "llama3"),
    Known("Llama-3.3-70B-Instruct", "llama3", "llama", 70.55, 80, 8, 128, 64, 128256, "llama3"),
    Known("Llama-3.1-8B-Instruct", "llama3", "llama", 8.03, 32, 8, 128, 32, 128256, "llama3"),
    Known("Llama-3.2-3B-Instruct", "llama3", "llama", 3.21, 28, 8, 128, 24, 128256, "llama3"),
    Known("Llama-3.2-1B-Instruct", "llama3", "llama", 1.24, 16, 8, 64, 32, 128256, "llama3"),
    Known("EAGLE3-LLaMA3.1-Instruct-8B", "llama3", "llama", 0.25, 1, 8, 128, 32, 128256, "llama3",
          kind="eagle3"),
    Known("EAGLE3-LLaMA3.3-Instruct-70B", "llama3", "llama", 0.85, 1, 8, 128, 64, 128256,
          "llama3", kind="eagle3"),
    Known("Qwen2.5-Coder-32B-Instruct", "qwen2.5", "qwen2", 32.76, 64, 8, 128, 40, 152064,
          "qwen2.5", context=32768),
    Known("Qwen2.5-Coder-7B-Instruct", "qwen2.5", "qwen2", 7.62, 28, 4, 128, 28, 152064,
          "qwen2.5", context=32768),
    Known("Qwen2.5-Coder-1.5B-Instruct", "qwen2.5", "qwen2", 1.54, 28, 2, 128, 12, 151936,
          "qwen2.5", context=32768),
    Known("Qwen2.5-Coder-0.5B-Instruct", "qwen2.5", "qwen2", 0.49, 24, 2, 64, 14, 151936,
          "qwen2.5", context=32768),
    Known("Qwen2.5-72B-Instruct", "qwen2.5", "qwen2", 72.7, 80, 8, 128, 64, 152064, "qwen2.5",
          context=32768),
    Known("Qwen2.5-0.5B-Instruct", "qwen2.5", "qwen2", 0.49, 24, 2, 64, 14, 151936, "qwen2.5",
          context=32768),
    Known("Qwen3-32B", "qwen3", "qwen3", 32.8, 64, 8, 128, 64, 151936, "qwen3", context=40960),
    Known("Qwen3-8B", "qwen3", "qwen3", 8.19, 36, 8, 128, 32, 151936, "qwen3", context=40960),
    Known("Qwen3-1.7B", "qwen3", "qwen3", 2.03, 28, 8, 128, 16, 151936, "qwen3", context=40960),
    Known("Qwen3-0.6B", "qwen3", "qwen3", 0.75, 28, 8, 128, 16, 151936, "qwen3", context=40960),
    Known("DeepSeek-R1", "deepseek-v3", "deepseek2", 671.0, 61, 1, 576, 128, 129280,
          "deepseek-v3", kind="mtp", context=163840, expert_share=0.975),
    # MoE: 128 experts, 8 active; 30.5B in all, 3.3B active -> experts 29.0B (0.95)
    Known("Qwen3-30B-A3B", "qwen3", "qwen3moe", 30.53, 48, 4, 128, 32, 151936, "qwen3",
          context=40960, expert_share=0.95),
    Known("DeepSeek-R1-Distill-Llama-70B", "llama3", "llama", 70.55, 80, 8, 128, 64, 128256,
          "deepseek-r1-distill-llama"),
    Known("DeepSeek-R1-Distill-Llama-8B", "llama3", "llama", 8.03, 32, 8, 128, 32, 128256,
          "deepseek-r1-distill-llama"),
    Known("DeepSeek-R1-Distill-Qwen-32B", "qwen2.5", "qwen2", 32.76, 64, 8, 128, 40, 152064,
          "deepseek-r1-distill-qwen"),
    Known("DeepSeek-R1-Distill-Qwen-1.5B", "qwen2.5", "qwen2", 1.78, 28, 2, 128, 12, 151936,
          "deepseek-r1-distill-qwen"),
    Known("gemma-3-27b-it", "gemma3", "gemma3", 27.4, 62, 16, 128, 32, 262208, "gemma3",
          vocab_type="spm"),
    Known("gemma-3-1b-it", "gemma3", "gemma3", 1.0, 26, 1, 256, 4, 262144, "gemma3",
          vocab_type="spm", context=32768),
    # the shipped TGI profile's model: Vicuna 7B v1.3 (Llama 1, 2048 positions) and its repo of
    # 5 Medusa heads on it (13.5 GB base + 1.3 GB heads in BF16), so it plans with no network
    Known("vicuna-7b-v1.3", "vicuna", "llama", 6.74, 32, 32, 128, 32, 32000, "llama2",
          vocab_type="spm", context=2048),
    Known("medusa-vicuna-7b-v1.3", "vicuna", "llama", 7.41, 32, 32, 128, 32, 32000, "llama2",
          vocab_type="spm", kind="medusa", context=2048, spec_heads=5),
    Known("SmolLM2-135M-Instruct", "smollm2", "llama", 0.135, 30, 3, 64, 9, 49152, "smollm2",
          context=8192),
)

# Bytes per weight, as stored (GGUF file types and common HF quantisations).
BYTES_PER_WEIGHT: dict[str, float] = {
    "F32": 4.0, "F16": 2.0, "BF16": 2.0, "Q8_0": 1.0625, "Q6_K": 0.8203, "Q5_K_M": 0.7109,
    "Q5_K_S": 0.6875, "Q5_0": 0.6875, "Q4_K_M": 0.6055, "Q4_K_S": 0.5703, "Q4_0": 0.5625,
    "Q4_1": 0.625, "IQ4_XS": 0.5313, "Q3_K_M": 0.4883, "Q2_K": 0.3281, "FP8": 1.0,
    "AWQ": 0.5625, "GPTQ": 0.5625, "INT4": 0.5625,
    "4BIT": 0.5625, "8BIT": 1.0625,  # MLX quantised: 4/8 bits + a bf16 scale and bias per 64
}


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(" ", "-").replace("meta-", "")


def lookup(name: str) -> Known | None:
    """The catalog entry for a repo or file name ('bartowski/Meta-Llama-3.1-70B-Instruct-GGUF')."""
    key = _norm(name.rsplit("/", 1)[-1])
    best = [k for k in CATALOG if _norm(k.name) in key]
    return max(best, key=lambda k: len(k.name)) if best else None


def quant_in(name: str) -> str | None:
    upper = name.upper().replace("-", "_")
    hits = [q for q in BYTES_PER_WEIGHT if q in upper]
    return max(hits, key=len) if hits else None


# Who publishes the original (safetensors) weights, by the start of the model's name.
ORIGINAL_ORG = (("DeepSeek", "deepseek-ai"), ("Llama", "meta-llama"), ("Qwen", "Qwen"),
                ("gemma", "google"), ("SmolLM", "HuggingFaceTB"))


def original_repo(name: str) -> str | None:
    """The repo of the original weights of a catalog model ('Llama-3.1-70B-Instruct' ->
    'meta-llama/Llama-3.1-70B-Instruct'), None when the catalog does not know it."""
    known = lookup(name)
    if known is None or known.kind != "model":
        return None
    org = next((o for prefix, o in ORIGINAL_ORG if known.name.startswith(prefix)), None)
    return f"{org}/{known.name}" if org else None
