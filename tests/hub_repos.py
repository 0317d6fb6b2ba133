"""Repos for the stand-in Hub (tests/fake_hf_hub.py), laid out as the real ones are.

Large models are "stub" files: listed with their real size (the sizes bartowski's model cards
give), served as a GGUF metadata header written here and zeros after it. The headers carry the
real architecture facts of each model (layers, heads, KV heads, embedding, context) and a
vocabulary with the real shape: Qwen2.5's 151,936 tokens (72B/7B files padded to 152,064, as
their GGUFs are), Llama 3's 128,256, Llama 2's 32,000 SentencePiece pieces. The token texts
themselves are stand-ins (no tokenizer can be downloaded here), the same list for every model
of one family, so the vocabulary rules see what they would see on the real files.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import gguf

from tests.fake_hf_hub import write_stub

GB = 10**9


@dataclass(frozen=True)
class Shape:
    arch: str
    name: str
    size_label: str
    layers: int
    heads: int
    kv_heads: int
    embedding: int
    context: int


@dataclass(frozen=True)
class Vocab:
    model: str  # tokenizer.ggml.model
    pre: str
    count: int
    pad_to: int
    bos: int
    eos: int
    add_bos: bool
    stem: str


QWEN = Vocab("gpt2", "qwen2", 151936, 151936, 151643, 151645, False, "qw")
QWEN_PADDED = Vocab("gpt2", "qwen2", 151936, 152064, 151643, 151645, False, "qw")
LLAMA3 = Vocab("gpt2", "llama-bpe", 128256, 128256, 128000, 128009, True, "l3")
LLAMA2 = Vocab("llama", "default", 32000, 32000, 1, 2, True, "l2")

# (repo, file, real size in bytes, shape, vocab)
MODELS: list[tuple[str, str, int, Shape, Vocab]] = [
    ("bartowski/Qwen2.5-72B-Instruct-GGUF", "Qwen2.5-72B-Instruct-Q4_K_M.gguf", 47_420_000_000,
     Shape("qwen2", "Qwen2.5 72B Instruct", "72B", 80, 64, 8, 8192, 32768), QWEN_PADDED),
    ("bartowski/Qwen2.5-7B-Instruct-GGUF", "Qwen2.5-7B-Instruct-Q4_K_M.gguf", 4_680_000_000,
     Shape("qwen2", "Qwen2.5 7B Instruct", "7B", 28, 28, 4, 3584, 32768), QWEN_PADDED),
    ("bartowski/Qwen2.5-7B-Instruct-GGUF", "Qwen2.5-7B-Instruct-Q8_0.gguf", 8_100_000_000,
     Shape("qwen2", "Qwen2.5 7B Instruct", "7B", 28, 28, 4, 3584, 32768), QWEN_PADDED),
    ("bartowski/Qwen2.5-0.5B-Instruct-GGUF", "Qwen2.5-0.5B-Instruct-Q8_0.gguf", 531_000_000,
     Shape("qwen2", "Qwen2.5 0.5B Instruct", "0.5B", 24, 14, 2, 896, 32768), QWEN),
    ("bartowski/Meta-Llama-3.1-70B-Instruct-GGUF", "Meta-Llama-3.1-70B-Instruct-Q4_K_M.gguf",
     42_520_000_000, Shape("llama", "Meta Llama 3.1 70B Instruct", "70B", 80, 64, 8, 8192,
                           131072), LLAMA3),
    ("bartowski/Llama-3.2-1B-Instruct-GGUF", "Llama-3.2-1B-Instruct-Q8_0.gguf", 1_320_000_000,
     Shape("llama", "Llama 3.2 1B Instruct", "1B", 16, 32, 8, 2048, 131072), LLAMA3),
    ("bartowski/Llama-3.2-3B-Instruct-GGUF", "Llama-3.2-3B-Instruct-Q8_0.gguf", 3_420_000_000,
     Shape("llama", "Llama 3.2 3B Instruct", "3B", 28, 24, 8, 3072, 131072), LLAMA3),
    ("bartowski/Llama-2-7b-Chat-GGUF", "Llama-2-7b-Chat-Q4_K_M.gguf", 4_080_000_000,
     Shape("llama", "Llama 2 7b Chat", "7B", 32, 32, 32, 4096, 4096), LLAMA2),
]
# Qwen2.5-72B's Q8_0 is published in two parts (files over 50 GB are split)
SPLIT = ("bartowski/Qwen2.5-72B-Instruct-GGUF", "Qwen2.5-72B-Instruct-Q8_0/"
         "Qwen2.5-72B-Instruct-Q8_0-{i:05d}-of-00002.gguf", (39_700_000_000, 37_560_000_000))


def tokens(vocab: Vocab) -> list[str]:
    out = [f"<{vocab.stem}:{i}>" for i in range(vocab.count)]
    return out + [f"[PAD{i}]" for i in range(vocab.count, vocab.pad_to)]


def write_header(path: Path, shape: Shape, vocab: Vocab, file_type: int,
                 extra: dict[str, int] | None = None) -> Path:
    w = gguf.GGUFWriter(path, shape.arch)
    for key, value in (extra or {}).items():
        w.add_uint32(key, value)
    w.add_name(shape.name)
    w.add_string("general.size_label", shape.size_label)
    w.add_file_type(file_type)
    w.add_block_count(shape.layers)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_embedding_length(shape.embedding)
    w.add_context_length(shape.context)
    w.add_key_length(shape.embedding // shape.heads)
    w.add_tokenizer_model(vocab.model)
    w.add_tokenizer_pre(vocab.pre)
    w.add_token_list(tokens(vocab))
    w.add_bos_token_id(vocab.bos)
    w.add_eos_token_id(vocab.eos)
    w.add_add_bos_token(vocab.add_bos)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return path


def _file_type(name: str) -> int:
    for quant in ("Q4_K_M", "Q8_0"):
        if quant in name:
            return int(getattr(gguf.LlamaFileType, f"MOSTLY_{quant}"))
    raise ValueError(name)


def build(root: Path) -> Path:
    """Write the stand-in Hub's repos under `root` (headers are cached next to it)."""
    headers = root.parent / f"{root.name}-headers"
    headers.mkdir(parents=True, exist_ok=True)
    for repo, file, size, shape, vocab in MODELS:
        header = headers / f"{file}.header"
        if not header.is_file():
            write_header(header, shape, vocab, _file_type(file))
        write_stub(root / repo / file, size, header)
    repo, pattern, sizes = SPLIT
    first = headers / "Qwen2.5-72B-Instruct-Q8_0.header"
    if not first.is_file():
        write_header(first, MODELS[0][3], QWEN_PADDED, _file_type("Q8_0"))
    for i, size in enumerate(sizes, 1):
        write_stub(root / repo / pattern.format(i=i), size, first if i == 1 else None)
    for repo, *_ in MODELS:
        (root / repo / "README.md").write_text(f"# {repo}\n")
    return root


def add_file(root: Path, repo: str, source: Path, name: str | None = None) -> Path:
    """A real file in a repo (e.g. a testbed GGUF), linked, not copied."""
    dest = root / repo / (name or source.name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.exists():
        try:
            dest.symlink_to(source)
        except OSError:
            shutil.copy2(source, dest)
    return dest


def add_medusa(root: Path) -> Path:
    """A Medusa repo (heads only, as FasterDecoding publishes them) and its base model."""
    base = root / "lmsys/vicuna-7b-v1.3"
    base.mkdir(parents=True, exist_ok=True)
    (base / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "vocab_size": 32000, "max_position_embeddings": 2048, "torch_dtype": "float16",
        "bos_token_id": 1, "eos_token_id": 2}))
    for i, size in enumerate((9_976_000_000, 3_500_000_000), 1):
        write_stub(base / f"pytorch_model-0000{i}-of-00002.safetensors", size)
    (base / ".meta.json").write_text(json.dumps({"safetensors": {
        "parameters": {"F16": 6_738_000_000}, "total": 6_738_000_000}}))
    heads = root / "FasterDecoding/medusa-vicuna-7b-v1.3"
    heads.mkdir(parents=True, exist_ok=True)
    (heads / "config.json").write_text(json.dumps({
        "medusa_num_heads": 5, "medusa_num_layers": 1,
        "base_model_name_or_path": "lmsys/vicuna-7b-v1.3"}))
    write_stub(heads / "medusa_lm_head.safetensors", 1_340_000_000)
    (heads / ".meta.json").write_text(json.dumps({"safetensors": {
        "parameters": {"F16": 670_000_000}, "total": 670_000_000}}))
    return root


def add_eagle3(root: Path) -> Path:
    """An HF (safetensors) target and EAGLE-3 heads published for it by someone else, plus a
    head for another model; sizes are the public ones, rounded."""
    target = root / "meta-llama/Llama-3.1-8B-Instruct"
    target.mkdir(parents=True, exist_ok=True)
    (target / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}))
    for i, size in enumerate((4_976_698_672, 5_000_000_000, 4_915_916_176, 1_168_138_808), 1):
        write_stub(target / f"model-0000{i}-of-00004.safetensors", size)
    (target / ".meta.json").write_text(json.dumps({"safetensors": {
        "parameters": {"BF16": 8_030_261_248}, "total": 8_030_261_248}}))
    for repo, hidden in (("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", 4096),
                         ("yuhuili/EAGLE3-LLaMA3.3-Instruct-70B", 8192)):
        _eagle3_head(root / repo, hidden)
    return root


def _eagle3_head(head: Path, hidden: int) -> None:
    head.mkdir(parents=True, exist_ok=True)
    (head / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": hidden, "num_hidden_layers": 1, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": 128256, "draft_vocab_size": 32000}))
    write_stub(head / "pytorch_model.safetensors", 850_000_000 if hidden == 4096 else
               1_700_000_000)
    (head / ".meta.json").write_text(json.dumps({"safetensors": {
        "parameters": {"BF16": 425_000_000}, "total": 425_000_000}}))


def add_base_model(root: Path) -> Path:
    """A GGUF repo whose model card names its original (`base_model`, as bartowski's cards do),
    and that original: Llama 3.2 1B in safetensors."""
    from tests.fake_hf_hub import write_meta

    write_meta(root / "bartowski/Llama-3.2-1B-Instruct-GGUF",
               cardData={"base_model": "meta-llama/Llama-3.2-1B-Instruct"})
    base = root / "meta-llama/Llama-3.2-1B-Instruct"
    base.mkdir(parents=True, exist_ok=True)
    (base / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
        "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 64, "vocab_size": 128256, "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16"}))
    write_stub(base / "model.safetensors", 2_471_645_608)
    write_meta(base, safetensors={"parameters": {"BF16": 1_235_814_400},
                                  "total": 1_235_814_400})
    return root


# Qwen3.5-27B as llama.cpp converts it: 64 decoder blocks plus one MTP block
# (`qwen35.nextn_predict_layers` = 1, `block_count` counts it); the stand-in Qwen vocabulary.
MTP_TARGET = ("unsloth/Qwen3.5-27B-GGUF", "Qwen3.5-27B-Q4_K_M.gguf", 16_700_000_000,
              Shape("qwen35", "Qwen3.5 27B", "27B", 65, 24, 4, 5120, 262144), QWEN)
# An EAGLE-3 head converted to GGUF (architecture `eagle3`), published for Llama 3.1 70B
EAGLE3_GGUF = ("someone/EAGLE3-LLaMA3.3-Instruct-70B-GGUF",
               "EAGLE3-LLaMA3.3-Instruct-70B-Q8_0.gguf", 1_060_000_000,
               Shape("eagle3", "EAGLE3 LLaMA3.3 Instruct 70B", "0.9B", 1, 64, 8, 8192, 131072),
               LLAMA3)
EAGLE3_TARGET = "bartowski/Llama-3.3-70B-Instruct-GGUF"
# A model whose repo ships an MTP sidecar beside it (`mtp-<model>.gguf`), as ggml-org does
SIDECAR_TARGET = ("ggml-org/gemma-4-E4B-it-GGUF", "gemma-4-E4B-it-Q4_K_M.gguf", 5_100_000_000,
                  Shape("gemma4", "Gemma 4 E4B It", "4B", 42, 8, 2, 2560, 131072), LLAMA2)
SIDECAR_FILE = ("mtp-gemma-4-E4B-it.gguf", 410_000_000,
                Shape("gemma4-assistant", "Gemma 4 E4B MTP", "0.4B", 4, 8, 2, 2560, 131072))


def add_spec_heads(root: Path) -> Path:
    """The repos above: a target with MTP layers, an EAGLE-3 GGUF head and its target, and a
    target with an MTP sidecar file."""
    headers = root.parent / f"{root.name}-headers"
    headers.mkdir(parents=True, exist_ok=True)
    repo, file, size, shape, vocab = MTP_TARGET
    header = write_header(headers / f"{file}.header", shape, vocab, _file_type(file),
                          extra={f"{shape.arch}.nextn_predict_layers": 1})
    write_stub(root / repo / file, size, header)
    repo, file, size, shape, vocab = EAGLE3_GGUF
    write_stub(root / repo / file, size,
               write_header(headers / f"{file}.header", shape, vocab, _file_type(file)))
    target = MODELS[4]  # Llama 3.1 70B's shape and vocabulary, as Llama 3.3 70B has
    t_shape = Shape("llama", "Llama 3.3 70B Instruct", "70B", 80, 64, 8, 8192, 131072)
    t_file = "Llama-3.3-70B-Instruct-Q4_K_M.gguf"
    write_stub(root / EAGLE3_TARGET / t_file, target[2],
               write_header(headers / f"{t_file}.header", t_shape, LLAMA3, _file_type(t_file)))
    repo, file, size, shape, vocab = SIDECAR_TARGET
    write_stub(root / repo / file, size,
               write_header(headers / f"{file}.header", shape, vocab, _file_type(file)))
    s_file, s_size, s_shape = SIDECAR_FILE
    write_stub(root / repo / s_file, s_size,
               write_header(headers / f"{s_file}.header", s_shape, vocab,
                            int(gguf.LlamaFileType.MOSTLY_Q8_0)))
    return root



def _hf_llama(folder: Path, layers: int, hidden: int, weights: int, params: int) -> None:
    """A Llama 3 repo in safetensors, with a tokenizer.json carrying the stand-in Llama 3 token
    texts (the first 1,000: the vocabulary rules compare what both files have)."""
    from tests.fake_hf_hub import write_meta

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "num_hidden_layers": layers, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": LLAMA3.count, "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16", "bos_token_id": LLAMA3.bos, "eos_token_id": LLAMA3.eos}))
    vocab = {text: i for i, text in enumerate(tokens(LLAMA3)[:1000])}
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE",
                                                                 "vocab": vocab}}))
    write_stub(folder / "model.safetensors", weights)
    write_meta(folder, safetensors={"parameters": {"BF16": params}, "total": params})


def add_llama_family(root: Path) -> Path:
    """Llama 3.1 8B, the EAGLE-3 head published for it (the catalog's best draft for it on
    vLLM) and Llama 3.2 1B (found by the Hub's search), in safetensors with their tokenizers, as
    meta-llama and yuhuili publish them (sizes rounded)."""
    _hf_llama(root / "meta-llama/Llama-3.1-8B-Instruct", 32, 4096, 16_060_000_000,
              8_030_261_248)
    _hf_llama(root / "meta-llama/Llama-3.2-1B-Instruct", 16, 2048, 2_471_645_608,
              1_235_814_400)
    _eagle3_head(root / "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", 4096)
    return root


# Qwen's own GGUF of Qwen2.5-Coder-7B (the Hub's search by Qwen finds no smaller Qwen GGUF here,
# so draft = "auto" ranks the catalog's drafts: first Qwen2.5-Coder-0.5B, from bartowski)
CODER_TARGET = ("Qwen/Qwen2.5-Coder-7B-Instruct-GGUF", "qwen2.5-coder-7b-instruct-q4_k_m.gguf",
                4_680_000_000, Shape("qwen2", "Qwen2.5 Coder 7B Instruct", "7B", 28, 28, 4,
                                     3584, 32768), QWEN_PADDED)
CODER_DRAFT = ("bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF",
               "Qwen2.5-Coder-0.5B-Instruct-Q8_0.gguf", 531_000_000,
               Shape("qwen2", "Qwen2.5 Coder 0.5B Instruct", "0.5B", 24, 14, 2, 896, 32768),
               QWEN)


def add_coder(root: Path, draft: bool = True) -> Path:
    """Qwen2.5-Coder-7B as Qwen publishes its GGUF, and (`draft`) bartowski's Coder 0.5B."""
    headers = root.parent / f"{root.name}-headers"
    headers.mkdir(parents=True, exist_ok=True)
    for repo, file, size, shape, vocab in (CODER_TARGET, CODER_DRAFT)[:2 if draft else 1]:
        header = headers / f"{file}.header"
        if not header.is_file():
            write_header(header, shape, vocab, _file_type(file.upper()))
        write_stub(root / repo / file, size, header)
    return root
