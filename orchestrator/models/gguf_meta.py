"""Read a GGUF file's metadata quickly, straight from its header.

`gguf.GGUFReader` builds a numpy view of every array item (10 s for a 151k-token vocabulary),
and importing `gguf` (with numpy) costs a quarter second per command; planning only needs
scalars and, for draft compatibility, the token texts. This reader follows the GGUF spec; its
constants are the spec's (tests check them against the `gguf` package). A header is untrusted
input: lengths are bounded one by one and in total (header bytes, array items, kept token
bytes), so a corrupt or hostile file (a sparse 100 GB file of empty strings, 16 MB tokens) is a
one-line ModelError naming the file, never a MemoryError or a hang. The values planning reads
are typed here too (`count`, `text`): a block count that is text, a NaN head count or a count of
2^63 is an error naming the key and the file.
"""

from __future__ import annotations

import enum
import mmap
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from specctl.orchestrator.errors import ModelError

GGUF_MAGIC = 0x46554747  # "GGUF", little-endian
MAX_STRING = 16 << 20  # a chat template is tens of KB; a key or token far less
MAX_ITEMS = 1 << 22  # items of one array (a vocabulary has ~10^5, the largest 262k)
MAX_TOTAL_ITEMS = 1 << 23  # items of all arrays together (tokens, merges, scores, types)
MAX_HEADER = 256 << 20  # metadata bytes (a 262k vocabulary with its merges: ~20 MB)
MAX_TOKEN = 64 << 10  # one token text that is kept (real ones are at most a few KB)
MAX_KEPT = 64 << 20  # all kept token texts together
MAX_COUNT = 1 << 24  # layers, heads, dimensions: far above any model's
MAX_TEXT = 4096  # a name, architecture or tokenizer name as planning keeps it
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

_SCALARS: dict[ValueType, struct.Struct] = {t: struct.Struct(f) for t, f in (
    (ValueType.UINT8, "<B"), (ValueType.INT8, "<b"), (ValueType.UINT16, "<H"),
    (ValueType.INT16, "<h"), (ValueType.UINT32, "<I"), (ValueType.INT32, "<i"),
    (ValueType.FLOAT32, "<f"), (ValueType.BOOL, "<?"), (ValueType.UINT64, "<Q"),
    (ValueType.INT64, "<q"), (ValueType.FLOAT64, "<d"))}


class _Corrupt(ValueError):
    """The header does not follow the spec, or exceeds a bound."""


@dataclass(frozen=True)
class ArrayInfo:
    """An array value that was skipped: its item type and length, and where its items lie in
    the file (so a vocabulary's bytes are read again without walking the header)."""

    item_type: ValueType
    length: int
    start: int = field(default=0, compare=False)
    end: int = field(default=0, compare=False)


_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class _Cursor:
    """Reads the header from a buffer (the file mapped, or bytes from the Hub)."""

    def __init__(self, buf: bytes | mmap.mmap) -> None:
        self.buf, self.pos, self.size = buf, 0, min(len(buf), MAX_HEADER)
        self.items = 0  # array items so far, against MAX_TOTAL_ITEMS
        self.eof_is_budget = len(buf) > MAX_HEADER  # past MAX_HEADER: too big, not cut

    def count_items(self, n: int) -> None:
        self.items += n
        if self.items > MAX_TOTAL_ITEMS:
            raise _Corrupt(f"more than {MAX_TOTAL_ITEMS} array items in all")

    def end(self) -> EOFError | _Corrupt:
        """What running past the buffer means: a cut header, or one beyond MAX_HEADER."""
        if self.eof_is_budget:
            return _Corrupt(f"metadata larger than {MAX_HEADER >> 20} MB")
        return EOFError()

    def take(self, fmt: struct.Struct) -> Any:
        if self.pos + fmt.size > self.size:
            raise self.end()
        value = fmt.unpack_from(self.buf, self.pos)[0]
        self.pos += fmt.size
        return value

    def length(self, bound: int, what: str) -> int:
        n = int(self.take(_U64))
        if n > bound:
            raise _Corrupt(f"{what} of {n} exceeds {bound}")
        return n

    def string(self) -> str:
        n = self.length(MAX_STRING, "a string length")
        end = self.pos + n
        if end > self.size:
            raise self.end()
        text = bytes(self.buf[self.pos:end]).decode("utf-8", errors="replace")
        self.pos = end
        return text

    def vtype(self) -> ValueType:
        code = self.take(_U32)
        try:
            return ValueType(code)
        except ValueError:
            raise _Corrupt(f"unknown value type {code}") from None

    def skip_strings(self, n: int) -> None:
        """n strings, unread (a vocabulary's merges): the hot loop of a header."""
        buf, pos, size, unpack = self.buf, self.pos, self.size, _U64.unpack_from
        for _ in range(n):
            if pos + 8 > size:
                raise self.end()
            (length,) = unpack(buf, pos)
            if length > MAX_STRING:
                raise _Corrupt(f"a string length of {length} exceeds {MAX_STRING}")
            pos += 8 + length
        if pos > size:
            raise self.end()
        self.pos = pos

    def strings(self, n: int) -> list[str]:
        """n strings (a vocabulary's tokens), decoded."""
        buf, pos, size, unpack = self.buf, self.pos, self.size, _U64.unpack_from
        out, kept = [], 0
        for _ in range(n):
            if pos + 8 > size:
                raise self.end()
            (length,) = unpack(buf, pos)
            kept += length
            if length > MAX_TOKEN or kept > MAX_KEPT:
                raise _Corrupt(f"a token of {length} bytes (at most {MAX_TOKEN >> 10} KB each, "
                               f"{MAX_KEPT >> 20} MB in all)")
            end = pos + 8 + length
            if end > size:
                raise self.end()
            out.append(bytes(buf[pos + 8:end]).decode("utf-8", errors="replace"))
            pos = end
        self.pos = pos
        return out

    def value(self, vtype: ValueType, keep_array: bool) -> Any:
        if vtype == ValueType.STRING:
            return self.string()
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        item = self.vtype()
        if item == ValueType.ARRAY:
            raise _Corrupt("nested arrays")
        n = self.length(MAX_ITEMS, "an array length")
        self.count_items(n)
        if keep_array and item == ValueType.STRING:
            return self.strings(n)
        if keep_array:  # numbers in one call, never a Python loop over 4M of them
            fmt = _SCALARS[item].format[1:]
            end = self.pos + n * _SCALARS[item].size
            if end > self.size:
                raise self.end()
            values = list(struct.unpack_from(f"<{n}{fmt}", self.buf, self.pos))
            self.pos = end
            return values
        start = self.pos
        if item == ValueType.STRING:
            self.skip_strings(n)
        else:
            self.pos += n * _SCALARS[item].size
            if self.pos > self.size:
                raise self.end()
        return ArrayInfo(item, n, start, self.pos)


def parse(buf: bytes | mmap.mmap, keep: frozenset[str] = frozenset()
          ) -> tuple[dict[str, Any], int]:
    """The metadata of a GGUF header in `buf` (from its start) and where the metadata ends.
    Raises _Corrupt or EOFError on a bad or cut header."""
    cur = _Cursor(buf)
    if cur.take(_U32) != GGUF_MAGIC:
        raise _Corrupt("bad magic")
    version = cur.take(_U32)
    if version < 2:
        raise _Corrupt(f"GGUF version {version} is too old; re-convert it")
    _tensors, n_kv = cur.take(_U64), cur.length(MAX_KEYS, "a key count")
    meta: dict[str, Any] = {"GGUF.version": version}
    for _ in range(n_kv):
        key = cur.string()
        if key in meta:  # the spec's keys are unique: a second one is a crafted header
            raise _Corrupt(f"the key {key[:80]!r} appears twice")
        meta[key] = cur.value(cur.vtype(), key in keep)
    return meta, cur.pos


_PARSED: dict[tuple[str, int, int, frozenset[str]], dict[str, Any]] = {}


class Remembered(Protocol):
    """Headers remembered across commands (models/headers.Headers)."""

    def get(self, path: Path, st: os.stat_result) -> dict[str, Any] | None: ...

    def put(self, path: Path, st: os.stat_result, meta: dict[str, Any]) -> None: ...


def read_metadata(path: Path, keep: frozenset[str] = frozenset(),
                  remembered: Remembered | None = None) -> dict[str, Any]:
    """All key/value metadata; arrays come back as ArrayInfo unless their key is in `keep`.
    The file is mapped, not read; a file is parsed once per process (and again if it changed),
    and, with `remembered` and nothing kept, once for as long as it does not change."""
    try:
        st = path.stat()
        if stat.S_ISDIR(st.st_mode):
            raise ModelError(f"{path} is a folder; point the profile at the .gguf file in it")
        if not stat.S_ISREG(st.st_mode):
            raise ModelError(f"{path} is not a regular file; point the profile at a .gguf model")
        key = (str(path), st.st_size, st.st_mtime_ns, keep)
        if key not in _PARSED and remembered is not None and not keep:
            found = remembered.get(path, st)
            if found is not None:
                _PARSED[key] = found
        if key not in _PARSED:
            if st.st_size == 0:
                raise EOFError
            with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                _PARSED[key] = parse(mm, keep)[0]
            if remembered is not None and not keep:
                remembered.put(path, st, _PARSED[key])
        return _PARSED[key]
    except FileNotFoundError:
        raise ModelError(f"model file {path} not found; check the path") from None
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc.strerror or exc}") from None
    except (EOFError, _Corrupt, struct.error) as exc:
        raise ModelError(f"{path} is truncated or not a GGUF file "
                         f"({str(exc) or 'unexpected end of file'}); download it again") from None


def token_bytes(path: Path, first: int, last: int) -> bytes | None:
    """The raw bytes of tokens first..last-1 of the vocabulary (each length-prefixed, as stored):
    equal bytes, equal token texts, without decoding 10^5 strings. None without a vocabulary.
    Up to the vocabulary's end, its span from the parsed header is used (no second walk)."""
    try:
        tokens = read_metadata(path).get(TOKENS_KEY)
    except ModelError:
        tokens = None
    if isinstance(tokens, ArrayInfo) and tokens.item_type == ValueType.STRING and \
            last >= tokens.length and tokens.end > tokens.start:
        return _tail_tokens(path, tokens, first)
    try:
        with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            cur = _Cursor(mm)
            if cur.take(_U32) != GGUF_MAGIC or cur.take(_U32) < 2:
                return None
            _tensors, n_kv = cur.take(_U64), cur.length(MAX_KEYS, "a key count")
            for _ in range(n_kv):
                key, vtype = cur.string(), cur.vtype()
                if key != TOKENS_KEY or vtype != ValueType.ARRAY:
                    cur.value(vtype, False)
                    continue
                if cur.vtype() != ValueType.STRING:
                    return None
                n = cur.length(MAX_ITEMS, "an array length")
                cur.skip_strings(min(first, n))
                start = cur.pos
                cur.skip_strings(max(0, min(last, n) - first))
                if cur.pos - start > MAX_KEPT:
                    return None  # the caller reads the tokens, and says what is wrong
                return bytes(mm[start:cur.pos])
    except (OSError, ValueError, EOFError):
        return None  # unreadable here: the caller reads the tokens and says why
    return None


def _tail_tokens(path: Path, tokens: ArrayInfo, first: int) -> bytes | None:
    """The vocabulary's bytes from token `first` to its end, by its span in the file."""
    try:
        with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if tokens.end > len(mm):
                return None  # the file changed since it was parsed
            cur = _Cursor(mm)
            cur.pos = tokens.start
            cur.skip_strings(min(first, tokens.length))
            if tokens.end - cur.pos > MAX_KEPT:
                return None
            return bytes(mm[cur.pos:tokens.end])
    except (OSError, ValueError, EOFError, _Corrupt, struct.error):
        return None


def count(meta: dict[str, Any], key: str, path: Path, default: int = 0) -> int:
    """A count planning reads (layers, heads, a dimension, a token id): an integer 0..2^24, or
    per-layer integers (their largest); anything else names the key and the file."""
    value = meta.get(key, default)
    if isinstance(value, ArrayInfo):
        return default  # per-layer values that were not kept: the default stands
    items = value if isinstance(value, list) else [value]
    if not items or not all(type(v) is int and 0 <= v <= MAX_COUNT for v in items):
        shown = type(value).__name__ if isinstance(value, (list, str)) else repr(value)
        raise ModelError(f"{path}: {key} is {shown[:40]}, not a count from 0 to {MAX_COUNT}; "
                         "the file is damaged or not a model")
    return int(max(items))


def text(meta: dict[str, Any], key: str, path: Path, default: str) -> str:
    """A name planning reads (architecture, tokenizer, model name): text, cut to MAX_TEXT."""
    value = meta.get(key, default)
    if not isinstance(value, str):
        raise ModelError(f"{path}: {key} is {type(value).__name__}, not text; the file is "
                         "damaged or not a model")
    return value[:MAX_TEXT]


def token_id(meta: dict[str, Any], key: str) -> int | None:
    """A token id (BOS, EOS), when it is one (an integer below 2^32)."""
    value = meta.get(key)
    return value if type(value) is int and 0 <= value < 1 << 32 else None


def read_tokens(path: Path) -> list[str]:
    tokens = read_metadata(path, keep=frozenset({TOKENS_KEY})).get(TOKENS_KEY)
    if not isinstance(tokens, list) or (tokens and not isinstance(tokens[0], str)):
        raise ModelError(f"{path} has no tokenizer vocabulary ({TOKENS_KEY})")
    return tokens


def file_type_name(meta: dict[str, Any]) -> str | None:
    """'Q4_K_M', 'F16', ... from general.file_type."""
    ft = meta.get("general.file_type")
    return FILE_TYPES.get(ft) if isinstance(ft, int) else None
