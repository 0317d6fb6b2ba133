"""Read a GGUF file's metadata quickly, straight from its header.

`gguf.GGUFReader` builds a numpy view of every array item (10 s for a 151k-token vocabulary),
and importing `gguf` (with numpy) costs a quarter second per command; planning only needs
scalars and, for draft compatibility, the token texts. This reader follows the GGUF spec; its
constants are the spec's (tests check them against the `gguf` package). A header is untrusted
input: lengths are bounded, so a corrupt or hostile file is a one-line ModelError, never a
MemoryError or a hang.
"""

from __future__ import annotations

import enum
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from specctl.orchestrator.errors import ModelError

GGUF_MAGIC = 0x46554747  # "GGUF", little-endian
MAX_STRING = 64 << 20  # a chat template is tens of KB; a key or token far less
MAX_ITEMS = 1 << 26  # array items (a vocabulary has ~10^5)
MAX_KEYS = 1 << 16  # metadata keys (a model has ~50)
TOKENS_KEY = "tokenizer.ggml.tokens"


class ValueType(enum.IntEnum):
    """GGUF metadata value types (gguf.GGUFValueType)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# general.file_type -> quantisation name (gguf.LlamaFileType without MOSTLY_/ALL_)
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
              10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
              16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
              22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
              28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
              37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0"}

_SCALARS: dict[ValueType, str] = {
    ValueType.UINT8: "<B", ValueType.INT8: "<b", ValueType.UINT16: "<H", ValueType.INT16: "<h",
    ValueType.UINT32: "<I", ValueType.INT32: "<i", ValueType.FLOAT32: "<f", ValueType.BOOL: "<?",
    ValueType.UINT64: "<Q", ValueType.INT64: "<q", ValueType.FLOAT64: "<d",
}


class _Corrupt(ValueError):
    """The header does not follow the spec, or exceeds a bound."""


@dataclass(frozen=True)
class ArrayInfo:
    """An array value that was skipped: its item type and length."""

    item_type: ValueType
    length: int


def _read(fh: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    raw = fh.read(size)
    if len(raw) != size:
        raise EOFError
    return struct.unpack(fmt, raw)[0]


def _length(fh: BinaryIO, bound: int, what: str) -> int:
    n = int(_read(fh, "<Q"))
    if n > bound:
        raise _Corrupt(f"{what} of {n} exceeds {bound}")
    return n


def _string(fh: BinaryIO) -> str:
    n = _length(fh, MAX_STRING, "a string length")
    raw = fh.read(n)
    if len(raw) != n:
        raise EOFError
    return raw.decode("utf-8", errors="replace")


def _type(fh: BinaryIO) -> ValueType:
    code = _read(fh, "<I")
    try:
        return ValueType(code)
    except ValueError:
        raise _Corrupt(f"unknown value type {code}") from None


def _value(fh: BinaryIO, vtype: ValueType, keep_array: bool) -> Any:
    if vtype == ValueType.STRING:
        return _string(fh)
    if vtype in _SCALARS:
        return _read(fh, _SCALARS[vtype])
    item = _type(fh)
    if item == ValueType.ARRAY:
        raise _Corrupt("nested arrays")
    n = _length(fh, MAX_ITEMS, "an array length")
    if keep_array:
        return [_value(fh, item, False) for _ in range(n)]
    if item == ValueType.STRING:
        for _ in range(n):
            fh.seek(_length(fh, MAX_STRING, "a string length"), 1)
    else:
        fh.seek(n * struct.calcsize(_SCALARS[item]), 1)
    return ArrayInfo(item, n)


def parse(fh: BinaryIO, keep: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The metadata of the GGUF stream `fh` (at its start). Raises _Corrupt, EOFError,
    struct.error on a bad header."""
    if _read(fh, "<I") != GGUF_MAGIC:
        raise _Corrupt("bad magic")
    version = _read(fh, "<I")
    if version < 2:
        raise _Corrupt(f"GGUF version {version} is too old; re-convert it")
    _tensors, n_kv = _read(fh, "<Q"), _length(fh, MAX_KEYS, "a key count")
    meta: dict[str, Any] = {"GGUF.version": version}
    for _ in range(n_kv):
        key = _string(fh)
        meta[key] = _value(fh, _type(fh), key in keep)
    return meta


def read_metadata(path: Path, keep: frozenset[str] = frozenset()) -> dict[str, Any]:
    """All key/value metadata; arrays come back as ArrayInfo unless their key is in `keep`."""
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise ModelError(f"{path} is a folder; point the profile at the .gguf file in it")
        if not stat.S_ISREG(mode):
            raise ModelError(f"{path} is not a regular file; point the profile at a .gguf model")
        with path.open("rb") as fh:
            return parse(fh, keep)
    except FileNotFoundError:
        raise ModelError(f"model file {path} not found; fix the path in the profile or run "
                         "`specctl models testbed`") from None
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc.strerror or exc}") from None
    except (EOFError, _Corrupt, struct.error) as exc:
        raise ModelError(f"{path} is truncated or not a GGUF file "
                         f"({str(exc) or 'unexpected end of file'}); download it again") from None


def read_tokens(path: Path) -> list[str]:
    tokens = read_metadata(path, keep=frozenset({TOKENS_KEY})).get(TOKENS_KEY)
    if not isinstance(tokens, list):
        raise ModelError(f"{path} has no tokenizer vocabulary ({TOKENS_KEY})")
    return tokens


def file_type_name(meta: dict[str, Any]) -> str | None:
    """'Q4_K_M', 'F16', ... from general.file_type."""
    ft = meta.get("general.file_type")
    return FILE_TYPES.get(ft) if isinstance(ft, int) else None
