"""What a running gateway publishes of its routed models for `specctl status` (its state file,
gateway/owned.py; read back there as untrusted input): each model's route, why, the memory its
servers hold together, the load it sees, and per kind and load what the served requests told
(measure/route/learned.Learned.rows).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Kind(BaseModel):
    """One row of a published table: a kind at a load (requests at once: 1, 2, 3-4, 5+)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)

    kind: str = Field(max_length=32)
    load: str = Field(max_length=8)
    setting: str = Field(max_length=200)
    requests: int = Field(ge=0)
    explored: int = Field(ge=0)
    tps: dict[str, float] = Field(default_factory=dict, max_length=16)  # decode, by setting
    measured: dict[str, int] = Field(default_factory=dict, max_length=16)
    why: str = Field("", max_length=1000)


class Routed(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)

    route: str | None = Field(None, max_length=2000)
    why: str = Field("", max_length=2000)
    memory: str | None = Field(None, max_length=500)
    load: str = Field("", max_length=200)  # requests in the servers' slots and in line
    kinds: list[Kind] = Field(default_factory=list, max_length=128)
