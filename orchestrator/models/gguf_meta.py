"""Read a GGUF file's metadata quickly, straight from its header.

`gguf.GGUFReader` builds a numpy view of every array item (10 s for a 151k-token vocabulary);
planning only needs scalars and, for draft compatibility, the token texts. This reader follows the
GGUF spec with the `gguf` package's own type constants and skips arrays it is not asked for.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from gguf import GGUF_MAGIC, GGUFValueType, LlamaFileType

from specctl.orchestrator.errors import ModelError

_SCALARS: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}
TOKENS_KEY = "tokenizer.ggml.tokens"


@dataclass(frozen=True)
class ArrayInfo:
    """An array value that was skipped: its item type and length."""

    item_type: GGUFValueType
    length: int


def _read(fh: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    raw = fh.read(size)
    if len(raw) != size:
        raise EOFError
    return struct.unpack(fmt, raw)[0]


def _string(fh: BinaryIO) -> str:
    n = _read(fh, "<Q")
    raw = fh.read(n)
    if len(raw) != n:
        raise EOFError
    return raw.decode("utf-8", errors="replace")


def _value(fh: BinaryIO, vtype: GGUFValueType, keep_array: bool) -> Any:
    if vtype == GGUFValueType.STRING:
        return _string(fh)
    if vtype in _SCALARS:
        return _read(fh, _SCALARS[vtype])
    if vtype != GGUFValueType.ARRAY:
        raise ValueError(f"unknown GGUF value type {vtype}")
    item = GGUFValueType(_read(fh, "<I"))
    n = _read(fh, "<Q")
    if keep_array:
        return [_value(fh, item, False) for _ in range(n)]
    if item == GGUFValueType.STRING:
        for _ in range(n):
            fh.seek(_read(fh, "<Q"), 1)
    elif item in _SCALARS:
        fh.seek(n * struct.calcsize(_SCALARS[item]), 1)
    else:
        for _ in range(n):
            _value(fh, item, False)
    return ArrayInfo(item, n)


def read_metadata(path: Path, keep: frozenset[str] = frozenset()) -> dict[str, Any]:
    """All key/value metadata; arrays come back as ArrayInfo unless their key is in `keep`."""
    try:
        with path.open("rb") as fh:
            if _read(fh, "<I") != GGUF_MAGIC:
                raise ModelError(f"{path} is not a GGUF file (bad magic); point the profile at "
                                 "a .gguf model")
            version = _read(fh, "<I")
            if version < 2:
                raise ModelError(f"{path}: GGUF version {version} is too old; re-convert it")
            _tensors, n_kv = _read(fh, "<Q"), _read(fh, "<Q")
            meta: dict[str, Any] = {"GGUF.version": version}
            for _ in range(n_kv):
                key = _string(fh)
                meta[key] = _value(fh, GGUFValueType(_read(fh, "<I")), key in keep)
            return meta
    except FileNotFoundError:
        raise ModelError(f"model file {path} not found; fix the path in the profile or run "
                         "`specctl models testbed`") from None
    except IsADirectoryError:
        raise ModelError(f"{path} is a folder; point the profile at the .gguf file in it") from None
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc.strerror or exc}") from None
    except (EOFError, ValueError, struct.error) as exc:
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
    try:
        name = LlamaFileType(ft).name if ft is not None else None
        return name.removeprefix("MOSTLY_").removeprefix("ALL_") if name else None
    except ValueError:
        return None
