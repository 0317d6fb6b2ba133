"""Sizes and durations as people read them: "2.7 MiB" (not "0.0 GiB"), "3 h 12 min".

Sizes are binary (KiB, MiB, GiB: powers of 1024), the family memory figures use (sizes.py), so
one unit is on screen everywhere."""

from __future__ import annotations

from collections.abc import Callable

Say = Callable[[str], None]
"""A line of progress for the user: commands, the gateway and the measurements take one; the
CLI prints it on stderr, a service's journal gets it, a test collects it."""

_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB")


def size(n: float) -> str:
    """Bytes in binary units with two or three significant digits: 2.7 MiB, 44.2 GiB, 512
    bytes."""
    value, unit = float(max(n, 0)), 0
    while value >= 1000 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    if unit == 0:
        return f"{int(value)} bytes"
    return f"{value:.1f} {_UNITS[unit]}" if value < 100 else f"{value:.0f} {_UNITS[unit]}"


def duration(seconds: float) -> str:
    """A span of time in its two largest units: 45 s, 12 min, 3 h 12 min, 18 d 4 h, 3 y 20 d."""
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s} s"
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if hours == 0:
        return f"{minutes} min"
    if days == 0:
        rest = minutes % 60
        return f"{hours} h {rest} min" if rest else f"{hours} h"
    if days < 365:
        rest = hours % 24
        return f"{days} d {rest} h" if rest else f"{days} d"
    return f"{days // 365} y {days % 365} d"
