"""Memory sizes: integers of bytes inside, GiB (2^30 bytes) on screen, always labelled "GiB".

Every size specctl reads (nvidia-smi's MiB, a GGUF's file size, a recorded machine, a profile's
`*_gb` keys, which are GiB) becomes bytes once, at the edge; every comparison is between bytes;
every figure shown or written to JSON is GiB and says so (`*_gib` fields).
"""

from __future__ import annotations

GIB = 1 << 30
MIB = 1 << 20


def from_gib(value: float) -> int:
    """GiB (a profile's or a recorded machine's figure) -> bytes."""
    return round(value * GIB)


def in_gib(n: int, digits: int = 2) -> float:
    """Bytes -> GiB, rounded: for JSON fields named `*_gib`."""
    return round(n / GIB, digits)


def gib(n: int, digits: int = 1) -> str:
    """'21.5 GiB'."""
    return f"{n / GIB:.{digits}f} GiB"


def gib_pair(a: int, b: int) -> tuple[str, str]:
    """Two sizes with just enough decimals to tell them apart ('21.53 GiB', '21.50 GiB'), so a
    refusal never reads 'needs 21.5 GiB but the budget is 21.5 GiB'."""
    for digits in (1, 2, 3):
        left, right = gib(a, digits), gib(b, digits)
        if left != right or a == b:
            return left, right
    return f"{a:,} bytes", f"{b:,} bytes"
