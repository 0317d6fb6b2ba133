"""GGUF headers byte by byte, for hostile-input tests: any key with any value type (a count as a
string, NaN, a 16 MB token), and arrays of millions of empty strings written as holes (a sparse
file of 100 GB takes no disk). The `gguf` package writes only well-formed files."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MAGIC, VERSION = 0x46554747, 3
STRING, ARRAY = 8, 9
FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}


def string(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def scalar(vtype: int, value: object) -> bytes:
    return struct.pack("<I", vtype) + (string(value) if vtype == STRING  # type: ignore[arg-type]
                                       else struct.pack(FORMATS[vtype], value))


def array(item: int, values: Sequence[object]) -> bytes:
    body = b"".join(string(v) if item == STRING else struct.pack(FORMATS[item], v)  # type: ignore[arg-type]
                    for v in values)
    return struct.pack("<IIQ", ARRAY, item, len(values)) + body


@dataclass(frozen=True)
class Hole:
    """An array of `count` strings of `size` zero bytes (empty ones by default), written as
    holes in the file: 200 arrays of 2^26 empty strings make a 100 GB file that uses no disk."""

    count: int
    size: int = 0


def write(path: Path, kvs: Sequence[tuple[str, bytes | Hole]], arch: str = "qwen2") -> Path:
    """A GGUF of these key/value pairs (each value already encoded by `scalar` or `array`, or a
    Hole), after general.architecture."""
    with path.open("wb") as fh:
        fh.write(struct.pack("<IIQQ", MAGIC, VERSION, 0, len(kvs) + 1))
        fh.write(string("general.architecture") + scalar(STRING, arch))
        for key, value in kvs:
            fh.write(string(key))
            if isinstance(value, Hole) and value.size == 0:
                fh.write(struct.pack("<IIQ", ARRAY, STRING, value.count))
                fh.seek(8 * value.count, 1)  # zeros: the lengths of empty strings
            elif isinstance(value, Hole):
                fh.write(struct.pack("<IIQ", ARRAY, STRING, value.count))
                for _ in range(value.count):
                    fh.write(struct.pack("<Q", value.size))
                    fh.seek(value.size, 1)
            else:
                fh.write(value)
        fh.truncate()
    return path


def model(path: Path, **changes: bytes | Hole) -> Path:
    """A small well-formed qwen2-like header; `changes` replace or add keys (dots as '__')."""
    kvs: dict[str, bytes | Hole] = {
        "general.name": scalar(STRING, "hostile"), "qwen2.block_count": scalar(4, 4),
        "qwen2.attention.head_count": scalar(4, 8), "qwen2.attention.head_count_kv": scalar(4, 2),
        "qwen2.embedding_length": scalar(4, 512), "general.file_type": scalar(4, 15),
        "tokenizer.ggml.model": scalar(STRING, "gpt2"),
        "tokenizer.ggml.pre": scalar(STRING, "qwen2"),
        "tokenizer.ggml.tokens": array(STRING, [f"tok{i}" for i in range(16)])}
    kvs.update({k.replace("__", "."): v for k, v in changes.items()})
    return write(path, list(kvs.items()))
