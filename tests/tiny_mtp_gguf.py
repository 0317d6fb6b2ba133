"""A tiny model of an MTP architecture (llama.cpp's `qwen35`: Qwen3.5/3.6 dense, one MTP block
after the decoder blocks, `qwen35.nextn_predict_layers` = 1), written with the `gguf` package so
that llama-server serves it with `--spec-type draft-mtp`.

Two decoder blocks (one linear-attention, one full-attention: the architecture's hybrid memory
needs both kinds) and the MTP block. The weights are built, not trained, so that what the model
does is known: every block adds nothing (zero output projections), so each position's hidden
state is its token's embedding and, with the embeddings tied to the output, the model predicts
the token it just read: it repeats the last token. The MTP block's projection passes the token
embedding through, so the MTP head predicts the same: its drafts are what the target samples.
A byte-level BPE vocabulary (256 byte tokens, one merge, an end-of-text token) keeps it small.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

EMBED, HEADS, KV_HEADS, HEAD_DIM, FF, TRUNK = 64, 2, 1, 32, 128, 2
STATE, K_HEADS, V_HEADS, CONV = 16, 2, 4, 4  # the linear-attention (gated delta net) block


def byte_tokens() -> list[str]:
    """GPT-2's byte-to-unicode table: the 256 byte tokens of a byte-level BPE."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def write(out: Path, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    tokens = [*byte_tokens(), "Ġt", "<|endoftext|>"]
    vocab = len(tokens)
    w = gguf.GGUFWriter(out, "qwen35")
    w.add_name("tiny-qwen35-mtp")
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    w.add_context_length(2048)
    w.add_embedding_length(EMBED)
    w.add_block_count(TRUNK + 1)  # the MTP block counts
    w.add_uint32("qwen35.nextn_predict_layers", 1)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_rope_dimension_count(16)
    w.add_array("qwen35.rope.dimension_sections", [3, 3, 2, 0])
    w.add_uint32("qwen35.full_attention_interval", 2)  # block 0 linear attention, 1 full
    w.add_ssm_conv_kernel(CONV)
    w.add_ssm_inner_size(V_HEADS * STATE)
    w.add_ssm_state_size(STATE)
    w.add_ssm_time_step_rank(V_HEADS)
    w.add_ssm_group_count(K_HEADS)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([int(gguf.TokenType.CONTROL if t.startswith("<|") else
                           gguf.TokenType.NORMAL) for t in tokens])
    w.add_token_merges(["Ġ t"])
    w.add_bos_token_id(vocab - 1)
    w.add_eos_token_id(vocab - 1)
    w.add_add_bos_token(False)

    def f32(*shape: int, scale: float = 0.0) -> np.ndarray:
        if scale == 0.0:
            return np.zeros(shape, np.float32)
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    ones = np.ones(EMBED, np.float32)
    w.add_tensor("token_embd.weight", f32(vocab, EMBED, scale=1.0))
    w.add_tensor("output_norm.weight", ones)
    key_dim, value_dim = STATE * K_HEADS, STATE * V_HEADS
    for i in range(TRUNK + 1):
        blk = f"blk.{i}"
        w.add_tensor(f"{blk}.attn_norm.weight", ones)
        w.add_tensor(f"{blk}.post_attention_norm.weight", ones)
        w.add_tensor(f"{blk}.ffn_gate.weight", f32(FF, EMBED, scale=0.1))
        w.add_tensor(f"{blk}.ffn_up.weight", f32(FF, EMBED, scale=0.1))
        w.add_tensor(f"{blk}.ffn_down.weight", f32(EMBED, FF))  # adds nothing
        if i == 0:  # linear attention (the hybrid memory needs one such block)
            w.add_tensor(f"{blk}.attn_qkv.weight", f32(2 * key_dim + value_dim, EMBED, scale=0.1))
            w.add_tensor(f"{blk}.attn_gate.weight", f32(value_dim, EMBED, scale=0.1))
            w.add_tensor(f"{blk}.ssm_conv1d.weight", f32(2 * key_dim + value_dim, CONV,
                                                         scale=0.1))
            w.add_tensor(f"{blk}.ssm_dt.bias", f32(V_HEADS, scale=0.1))
            w.add_tensor(f"{blk}.ssm_a", -np.ones(V_HEADS, np.float32))
            w.add_tensor(f"{blk}.ssm_beta.weight", f32(V_HEADS, EMBED, scale=0.1))
            w.add_tensor(f"{blk}.ssm_alpha.weight", f32(V_HEADS, EMBED, scale=0.1))
            w.add_tensor(f"{blk}.ssm_norm.weight", np.ones(STATE, np.float32))
            w.add_tensor(f"{blk}.ssm_out.weight", f32(EMBED, value_dim))  # adds nothing
            continue
        w.add_tensor(f"{blk}.attn_q.weight", f32(HEAD_DIM * HEADS * 2, EMBED, scale=0.1))
        w.add_tensor(f"{blk}.attn_k.weight", f32(HEAD_DIM * KV_HEADS, EMBED, scale=0.1))
        w.add_tensor(f"{blk}.attn_v.weight", f32(HEAD_DIM * KV_HEADS, EMBED, scale=0.1))
        w.add_tensor(f"{blk}.attn_output.weight", f32(EMBED, HEAD_DIM * HEADS))  # adds nothing
        w.add_tensor(f"{blk}.attn_q_norm.weight", np.ones(HEAD_DIM, np.float32))
        w.add_tensor(f"{blk}.attn_k_norm.weight", np.ones(HEAD_DIM, np.float32))
    mtp = f"blk.{TRUNK}.nextn"
    passthrough = np.concatenate([np.eye(EMBED, dtype=np.float32),
                                  np.zeros((EMBED, EMBED), np.float32)], axis=1)
    w.add_tensor(f"{mtp}.eh_proj.weight", passthrough)  # [token embedding | hidden] -> token
    w.add_tensor(f"{mtp}.enorm.weight", ones)
    w.add_tensor(f"{mtp}.hnorm.weight", ones)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
