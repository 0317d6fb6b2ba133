"""The one base of the records measure/ saves and reads back (tuned results, the fastest
backend, losslessness certificates, kept traffic): read back as untrusted input, each is
validated by the model it was written from: no field it does not declare, no inf or NaN, and
frozen once read. A record that needs more (kept traffic is strict about types) adds to this
config; pydantic merges a subclass's model_config over its base's. Each builds its validator
when first used (defer_build): a command that reads no record (a plan) pays nothing for it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)
