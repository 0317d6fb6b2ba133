"""What the served requests told (measure/route/learned.Learned's figures), on disk: one file per
model, engine build and model files (the key tune's results have: tuned.key), so a restarted
gateway or `up` goes on from what it learned, and another build or file starts anew.

Only numbers are kept: seconds per token, tokens, counts, by setting, kind and load; never a
prompt or an answer. Bounded as the windows are (WINDOW values a cell, MAX_CELLS cells). Read
back it is untrusted input, validated by the model it was written from; a file that fails is
set aside and the figures start anew (said in one line).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from pathlib import Path
from typing import Annotated

from pydantic import Field

from specctl.orchestrator.errors import StateError
from specctl.orchestrator.files import inside, read_back, write_atomic
from specctl.orchestrator.measure.results.record import Record
from specctl.orchestrator.measure.route.learned import BUCKETS, WINDOW, Learned

VERSION = 1
MAX_CELLS = 512
Name = Annotated[str, Field(min_length=1, max_length=200)]
Load = Annotated[str, Field(pattern="^(" + "|".join(n for _, n in BUCKETS) + ")$")]
Seconds = Annotated[float, Field(ge=0, le=3600)]
Values = Annotated[list[Seconds], Field(max_length=WINDOW)]


class Cell(Record):
    setting: Name
    kind: Name = "-"  # a prefill cell is of a setting and load alone
    load: Load
    values: Values


class Figures(Record):
    version: int = Field(VERSION, ge=VERSION, le=VERSION)
    model: Name
    decode: list[Cell] = Field(default_factory=list, max_length=MAX_CELLS)
    prefill: list[Cell] = Field(default_factory=list, max_length=MAX_CELLS)
    answers: dict[Name, Annotated[list[Annotated[int, Field(ge=0, le=1 << 20)]],
                                  Field(max_length=WINDOW)]] = Field(default_factory=dict,
                                                                      max_length=64)
    chars: dict[Name, Annotated[list[Annotated[float, Field(ge=0, le=64)]],
                                Field(max_length=WINDOW)]] = Field(default_factory=dict,
                                                                    max_length=64)
    seen: list[tuple[Name, Load, Annotated[int, Field(ge=0)]]] = Field(
        default_factory=list, max_length=MAX_CELLS)
    explored: list[tuple[Name, Load, Annotated[int, Field(ge=0)]]] = Field(
        default_factory=list, max_length=MAX_CELLS)


def path_for(folder: Path, model: str, key: str) -> Path:
    return inside(folder, f"{model}-{key}", ".json", "model name")


def dump(model: str, learned: Learned) -> str:
    """The figures of `learned` as the file holds them (at most MAX_CELLS of each): taken
    where `learned` is changed (the gateway's loop), written elsewhere (`write_atomic`)."""
    figures = Figures(
        model=model,
        decode=[Cell(setting=s, kind=k, load=b, values=_finite(v))
                for (s, k, b), v in list(learned.decode.items())[-MAX_CELLS:]],
        prefill=[Cell(setting=s, load=b, values=_finite(v))
                 for (s, b), v in list(learned.prefill.items())[-MAX_CELLS:]],
        answers={k: list(v) for k, v in list(learned.answers.items())[-64:]},
        chars={k: [min(x, 64.0) for x in v] for k, v in list(learned.chars.items())[-64:]},
        seen=[(k, b, n) for (k, b), n in list(learned.seen.items())[-MAX_CELLS:]],
        explored=[(k, b, n) for (k, b), n in list(learned.explored.items())[-MAX_CELLS:]])
    return figures.model_dump_json()


def save(path: Path, model: str, learned: Learned) -> None:
    write_atomic(path, dump(model, learned))


def load(path: Path, into: Learned) -> str:
    """The figures in `path` put into `into`; '' when there are none, else what was set
    aside (one line)."""
    try:
        found = read_back(path, Figures.model_validate_json, "the served figures",
                          "They start anew.", limit=8 << 20)
    except StateError as exc:
        return str(exc)
    if found is None:
        return ""
    into.decode = {(c.setting, c.kind, c.load): deque(c.values, maxlen=WINDOW)
                   for c in found.decode}
    into.prefill = {(c.setting, c.load): deque(c.values, maxlen=WINDOW) for c in found.prefill}
    into.answers = {k: deque(v, maxlen=WINDOW) for k, v in found.answers.items()}
    into.chars = {k: deque(v, maxlen=WINDOW) for k, v in found.chars.items()}
    into.seen = Counter({(k, b): n for k, b, n in found.seen})
    into.explored = Counter({(k, b): n for k, b, n in found.explored})
    return ""


def _finite(values: deque[float]) -> list[float]:
    return [min(v, 3600.0) for v in values if math.isfinite(v) and v >= 0]
