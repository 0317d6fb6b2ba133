"""The one sanitiser for text that came from outside (profiles, model metadata, Hub answers,
paths, server output) before it reaches a terminal.

A terminal obeys escape sequences: an ESC in a GGUF `general.name` or a profile description
could move the cursor, retitle the window or rewrite what was printed, and a newline in a name
could forge a line of `specctl plan`. So outside text is printed as `line` (one line: newlines
and other control characters escaped, long text cut) or `block` (several lines, e.g. a server
log: control characters other than the line breaks escaped). The consoles also strip control
characters from everything they print (`strip_control`), a net below the renderers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import ConsoleRenderable, RenderableType

# C0 (but tab and newline), DEL, C1, and the bidirectional overrides that reorder what is shown
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                     r"\u2066-\u2069]")
_LINE_BREAKS = re.compile(r"\r\n|[\n\r\x0b\x0c\x85\u2028\u2029]")
LINE_LIMIT = 4000  # characters of one outside value in one printed line


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def line(text: object, limit: int = LINE_LIMIT) -> str:
    """Outside text as one printable line: line breaks shown as \\n, other control characters
    as \\xNN (ESC as \\x1b), text beyond `limit` characters cut with an ellipsis."""
    s = str(text)
    if len(s) > limit:
        s = s[:limit] + "…"
    s = _LINE_BREAKS.sub(lambda m: "\\n" if m.group(0) in ("\n", "\r\n") else _escape(m), s)
    return CONTROL.sub(_escape, s.replace("\t", " "))


def block(text: str, limit: int = 1 << 20) -> str:
    """Outside text of several lines (a log): each line kept, control characters escaped."""
    return "\n".join(line(part, limit) for part in text.split("\n"))


def clean(value: Any) -> Any:
    """`line` for text; lists, tuples and dicts sanitised inside; anything else as it is."""
    if isinstance(value, str):
        return line(value)
    if isinstance(value, (list, tuple)):
        return type(value)(clean(v) for v in value)
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    return value


def strip_control() -> Any:
    """The console's render hook (rich imported only when a console is made)."""
    from rich.console import RenderHook

    class StripControl(RenderHook):
        """A rich render hook: control characters (ESC first) leave every Text a console prints,
        whatever the renderer forgot. Rich's own styles are added after, so they stay."""

        def process_renderables(self, renderables: list[ConsoleRenderable]
                                ) -> list[ConsoleRenderable]:
            return [_strip(r) for r in renderables]

    return StripControl()


def _strip(renderable: RenderableType) -> Any:
    from rich.text import Text

    if not isinstance(renderable, Text) or not CONTROL.search(renderable.plain):
        return renderable
    cuts = sorted({i for m in CONTROL.finditer(renderable.plain) for i in (m.start(), m.end())})
    pieces: Iterable[Text] = renderable.divide(cuts)
    kept = [p for p in pieces if not CONTROL.fullmatch(p.plain)]
    out = Text("", style=renderable.style, justify=renderable.justify,
               overflow=renderable.overflow, no_wrap=renderable.no_wrap, end=renderable.end)
    for piece in kept:
        out.append_text(piece)
    return out
