"""GGUF header reader, on tiny files written with gguf.GGUFWriter."""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import pytest

from specctl.orchestrator.errors import ModelError
from specctl.orchestrator.models import gguf_meta
from specctl.orchestrator.models.gguf_meta import (
    TOKENS_KEY,
    ArrayInfo,
    file_type_name,
    read_metadata,
    read_tokens,
)
from tests.ggufs import DEFAULT_TOKENS, write_gguf


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_gguf(tmp_path / "tiny.gguf", arch="llama", name="Tiny Llama", block_count=6,
                      heads=16, kv_heads=4, embedding=1024, tokenizer_model="llama",
                      tokenizer_pre="default", bos=1, eos=2, add_bos=True, add_eos=False)


def test_read_metadata_scalars(tiny: Path) -> None:
    meta = read_metadata(tiny)
    assert meta["GGUF.version"] == 3
    assert meta["general.architecture"] == "llama"
    assert meta["general.name"] == "Tiny Llama"
    assert meta["llama.block_count"] == 6
    assert meta["llama.attention.head_count"] == 16
    assert meta["llama.attention.head_count_kv"] == 4
    assert meta["llama.embedding_length"] == 1024
    assert meta["tokenizer.ggml.model"] == "llama"
    assert meta["tokenizer.ggml.pre"] == "default"
    assert meta["tokenizer.ggml.bos_token_id"] == 1
    assert meta["tokenizer.ggml.eos_token_id"] == 2
    assert meta["tokenizer.ggml.add_bos_token"] is True
    assert meta["tokenizer.ggml.add_eos_token"] is False


def test_arrays_are_skipped_unless_kept(tiny: Path) -> None:
    skipped = read_metadata(tiny)[TOKENS_KEY]
    assert skipped == ArrayInfo(gguf_meta.ValueType.STRING, len(DEFAULT_TOKENS))
    kept = read_metadata(tiny, keep=frozenset({TOKENS_KEY}))[TOKENS_KEY]
    assert kept == list(DEFAULT_TOKENS)


def test_keys_after_a_skipped_array_are_read(tmp_path: Path) -> None:
    # the token list comes before the BOS/EOS ids in the file: skipping must land exactly
    tokens = ["<unk>", "<s>", "</s>", "héllo", "wörld", "", "x" * 300, "日本"]
    path = write_gguf(tmp_path / "unicode.gguf", tokens=tokens, bos=1, eos=2)
    meta = read_metadata(path)
    assert meta[TOKENS_KEY].length == len(tokens)
    assert meta["tokenizer.ggml.bos_token_id"] == 1
    assert meta["tokenizer.ggml.eos_token_id"] == 2
    assert read_tokens(path) == tokens


def test_numeric_arrays_are_skipped_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "arrays.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_array("test.floats", [0.5, 1.5, 2.5])
    writer.add_array("test.ints", [3, 1, 2])
    writer.add_uint32("test.after", 77)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    meta = read_metadata(path, keep=frozenset({"test.ints"}))
    assert isinstance(meta["test.floats"], ArrayInfo)
    assert meta["test.floats"].length == 3
    assert meta["test.ints"] == [3, 1, 2]
    assert meta["test.after"] == 77


def test_read_tokens(tiny: Path) -> None:
    assert read_tokens(tiny) == list(DEFAULT_TOKENS)


def test_read_tokens_without_a_vocabulary(tmp_path: Path) -> None:
    path = tmp_path / "novocab.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelError, match="no tokenizer vocabulary"):
        read_tokens(path)


@pytest.mark.parametrize(("file_type", "name"), [
    (gguf.LlamaFileType.MOSTLY_Q4_K_M, "Q4_K_M"),
    (gguf.LlamaFileType.MOSTLY_F16, "F16"),
    (gguf.LlamaFileType.MOSTLY_Q8_0, "Q8_0"),
    (gguf.LlamaFileType.MOSTLY_Q4_1, "Q4_1"),
    (gguf.LlamaFileType.MOSTLY_BF16, "BF16"),
])
def test_file_type_name(file_type: gguf.LlamaFileType, name: str) -> None:
    assert file_type_name({"general.file_type": int(file_type)}) == name


def test_file_type_name_unknown_or_missing() -> None:
    assert file_type_name({}) is None
    assert file_type_name({"general.file_type": 99999}) is None


def test_file_type_name_from_a_written_file(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "q8.gguf", file_type=int(gguf.LlamaFileType.MOSTLY_Q8_0))
    assert file_type_name(read_metadata(path)) == "Q8_0"


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent.gguf"
    with pytest.raises(ModelError, match="not found") as info:
        read_metadata(missing)
    assert str(missing) in str(info.value)


def test_not_a_gguf_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.gguf"
    path.write_text("this is a text file, not a model\n")
    with pytest.raises(ModelError, match="not a GGUF file") as info:
        read_metadata(path)
    assert str(path) in str(info.value)


def test_too_old_gguf_version(tmp_path: Path) -> None:
    path = tmp_path / "v1.gguf"
    path.write_bytes(gguf.GGUF_MAGIC.to_bytes(4, "little") + (1).to_bytes(4, "little"))
    with pytest.raises(ModelError, match="version 1 is too old"):
        read_metadata(path)


def _cut(path: Path, keep: int) -> Path:
    path.write_bytes(path.read_bytes()[:keep])
    return path


@pytest.mark.parametrize("keep", [0, 3, 10, 30])
def test_truncated_header(tiny: Path, keep: int) -> None:
    _cut(tiny, keep)
    with pytest.raises(ModelError, match="truncated") as info:
        read_metadata(tiny)
    assert str(tiny) in str(info.value)


def test_truncated_inside_the_token_list(tiny: Path) -> None:
    data = tiny.read_bytes()
    _cut(tiny, data.index(b"tok7") + 2)
    with pytest.raises(ModelError, match="truncated"):
        read_metadata(tiny)
    with pytest.raises(ModelError, match="truncated"):
        read_tokens(tiny)


def test_truncated_message_says_what_happened(tiny: Path) -> None:
    _cut(tiny, 10)
    with pytest.raises(ModelError) as info:
        read_metadata(tiny)
    # an EOFError has no text; the reader means to say "unexpected end", not "()"
    assert "unexpected end" in str(info.value)


def test_a_directory_is_a_model_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError):
        read_metadata(tmp_path)


def test_the_spec_constants_are_the_gguf_packages() -> None:
    assert gguf_meta.GGUF_MAGIC == gguf.GGUF_MAGIC
    assert {t.name: t.value for t in gguf_meta.ValueType} == {
        t.name: t.value for t in gguf.GGUFValueType}
    names = {int(t): t.name.removeprefix("MOSTLY_").removeprefix("ALL_")
             for t in gguf.LlamaFileType if t.name != "GUESSED"}
    assert names == gguf_meta.FILE_TYPES


def _header(*kv: bytes, n_kv: int | None = None) -> bytes:
    head = gguf.GGUF_MAGIC.to_bytes(4, "little") + (3).to_bytes(4, "little")
    head += (0).to_bytes(8, "little") + (n_kv if n_kv is not None else len(kv)).to_bytes(8,
                                                                                       "little")
    return head + b"".join(kv)


def _u64(n: int) -> bytes:
    return n.to_bytes(8, "little")


@pytest.mark.parametrize(("what", "data"), [
    ("absurd key length", _header(_u64(1 << 62) + b"key")),
    ("absurd key count", _header(n_kv=1 << 60)),
    ("absurd array length", _header(_u64(3) + b"key" + (9).to_bytes(4, "little")
                                     + (8).to_bytes(4, "little") + _u64(1 << 61))),
    ("unknown value type", _header(_u64(3) + b"key" + (77).to_bytes(4, "little"))),
    ("nested array", _header(_u64(3) + b"key" + (9).to_bytes(4, "little")
                             + (9).to_bytes(4, "little") + _u64(1))),
])
def test_hostile_headers_are_one_line_errors(tmp_path: Path, what: str, data: bytes) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(ModelError, match="truncated or not a GGUF") as info:
        read_metadata(path)
    assert "\n" not in str(info.value), what


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    with pytest.raises(ModelError, match="not a regular file"):
        read_metadata(fifo)
