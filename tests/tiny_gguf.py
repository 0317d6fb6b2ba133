"""The tiny Llama models of tests/tinymodels.py as GGUF files, so that llama.cpp serves the same
weights and vocabulary that vLLM and MLX-LM serve from the Hugging Face folder.

llama.cpp's own converter (convert_hf_to_gguf.py) refuses a byte-level BPE whose pre-tokenizer it
does not recognise, which a tokenizer trained here is; this writes the same layout with the `gguf`
package: llama metadata, the tokenizer as "gpt2" BPE with llama.cpp's "default" pre-tokenizer, and
F32 tensors under llama.cpp's names, Q and K rows permuted as the converter permutes them.
The safetensors file is read directly (an 8-byte header length, a JSON header, raw tensors).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np

LAYER_NAMES = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}
TOP_NAMES = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    (size,) = struct.unpack_from("<Q", raw)
    header: dict[str, Any] = json.loads(raw[8:8 + size])
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise ValueError(f"{path}: {name} is {info['dtype']}; only F32 is converted")
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(raw, np.float32, (end - start) // 4,
                                  8 + size + start).reshape(info["shape"])
    return out


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """HF's rotary layout (halves) to llama.cpp's (interleaved pairs), per head."""
    halves: np.ndarray = w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:])
    out: np.ndarray = halves.swapaxes(1, 2).reshape(w.shape)
    return out


def gguf_name(hf: str) -> str:
    stem = hf.removesuffix(".weight")
    if stem in TOP_NAMES:
        return TOP_NAMES[stem] + ".weight"
    _, _, layer, rest = stem.split(".", 3)  # model.layers.N.<rest>
    return f"blk.{layer}.{LAYER_NAMES[rest]}.weight"


def convert(model_dir: Path, out: Path) -> Path:
    """Write model_dir (a tinymodels.py Llama) as an F32 GGUF at `out`; return `out`."""
    config = json.loads((model_dir / "config.json").read_text())
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    template = (model_dir / "chat_template.jinja").read_text()
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    theta = config.get("rope_parameters", {}).get("rope_theta", config.get("rope_theta", 1e4))
    w = gguf.GGUFWriter(out, "llama")
    w.add_name(model_dir.name)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(config["head_dim"])
    w.add_rope_freq_base(float(theta))
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_vocab_size(config["vocab_size"])
    special = {t["id"] for t in tok["added_tokens"] if t["special"]}
    by_id = sorted((i, t) for t, i in tok["model"]["vocab"].items())
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([t for _, t in by_id])
    w.add_token_types([int(gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL)
                       for i, _ in by_id])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]])
    w.add_bos_token_id(config["bos_token_id"])
    w.add_eos_token_id(config["eos_token_id"])
    w.add_pad_token_id(config["pad_token_id"])
    w.add_add_bos_token(False)  # the chat template writes it
    w.add_chat_template(template)
    for name, tensor in read_safetensors(model_dir / "model.safetensors").items():
        if name.endswith("q_proj.weight"):
            tensor = permute(tensor, heads)
        elif name.endswith("k_proj.weight"):
            tensor = permute(tensor, kv_heads)
        w.add_tensor(gguf_name(name), np.ascontiguousarray(tensor))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
