"""Tables that never cut a figure, a URL or a path.

On a terminal: rich tables; columns that do not fit the width move into a further table below
(the first column repeated as the key), and only free-text columns fold. Piped: plain text, one
row per line, columns padded, no box characters, so `grep` and `cut` work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specctl.orchestrator import sanitise

_BORDER = 3  # a rich column's padding and its share of the borders
_MIN_TEXT = 24  # a free-text column is never folded narrower than this


@dataclass(frozen=True)
class Column:
    header: str
    right: bool = False  # figures align right
    text: bool = False  # free text: may fold onto more lines (never cut)


def _natural(col: Column, cells: Sequence[str]) -> int:
    return max([len(col.header), *(len(c) for c in cells)])


def _groups(columns: Sequence[Column], widths: list[int],
            total: int) -> tuple[list[list[int]], list[int]]:
    """Column indexes per table (the first column in each, the rest packed in order), and the
    columns too wide for any table beside the key (printed as lines)."""
    key = widths[0] + _BORDER + 1
    groups: list[list[int]] = []
    lines: list[int] = []
    current, used = [0], key
    for i in range(1, len(columns)):
        need = (min(widths[i], _MIN_TEXT) if columns[i].text else widths[i]) + _BORDER
        if key + need > total:
            lines.append(i)
            continue
        if used + need > total and len(current) > 1:
            groups.append(current)
            current, used = [0], key
        current.append(i)
        used += need
    if len(current) > 1 or not groups:
        groups.append(current)
    return groups, lines


def show(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]],
         title: str = "") -> None:
    """Print rows (plain strings, no markup) under columns; every cell as one sanitised line
    (model names, paths and reasons come from outside)."""
    rows = [[sanitise.line(cell) for cell in row] for row in rows]
    cols = list(zip(*rows, strict=True)) if rows else [() for _ in columns]
    widths = [_natural(c, cells) for c, cells in zip(columns, cols, strict=True)]
    if not console.is_terminal:
        _plain(console, columns, rows, widths, title)
        return
    groups, lines = _groups(columns, widths, console.width)
    for n, group in enumerate(groups):
        table = Table(title=escape(title) if title and n == 0 else None)
        for i in group:
            c = columns[i]
            table.add_column(escape(c.header), justify="right" if c.right else "left",
                             no_wrap=not c.text, overflow="fold",
                             min_width=None if c.text else widths[i])
        for row in rows:
            table.add_row(*(escape(row[i]) for i in group))
        console.print(table)
    for i in lines:  # wider than the terminal beside the key: one line each, never cut
        console.print(f"{columns[i].header}:", highlight=False, markup=False)
        for row in rows:
            console.print(f"  {row[0]}: {row[i]}", highlight=False, markup=False, soft_wrap=True)


def _plain(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]],
           widths: list[int], title: str) -> None:
    def line(cells: Sequence[str]) -> str:
        parts = [cell.rjust(w) if col.right else cell.ljust(w)
                 for col, cell, w in zip(columns, cells, widths, strict=True)]
        return "  ".join(parts).rstrip()

    if title:
        console.print(title, highlight=False, markup=False, soft_wrap=True)
    console.print(line([c.header for c in columns]), highlight=False, markup=False,
                  soft_wrap=True)
    for row in rows:
        console.print(line(row), highlight=False, markup=False, soft_wrap=True)
