"""A backend's own section of a profile: the base model each adapter's options extend."""

from __future__ import annotations

import typing
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator


class Options(BaseModel):
    """A backend's own section of a profile (e.g. `[llamacpp]`); none by default. Untrusted
    input like the rest of the profile, validated strictly: no NaN or infinity, `true` is no
    number and `"yes"` or 1 is no true/false (a loose boolean could turn on remote code)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    target: str | None = Field(None, max_length=4096, description="the target in this backend's "
                               "format, when it differs (e.g. converted weights beside a GGUF)")
    draft: str | None = Field(None, max_length=4096, description="the draft in this backend's "
                              "format, when it differs")

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name is None:
            return value
        annotation = cls.model_fields[info.field_name].annotation
        if isinstance(value, bool) and bool not in (annotation, *typing.get_args(annotation)):
            raise ValueError("expected a number or text, not true/false")
        if any(isinstance(v, str) and "\x00" in v
               for v in (value if isinstance(value, (list, tuple)) else [value])):
            raise ValueError("text with a NUL character; no name or path can hold one")
        if isinstance(value, list) and _is_tuple(annotation):
            return tuple(value)  # a TOML array is a list; strict tuples take only tuples
        return value


def _is_tuple(annotation: Any) -> bool:
    return any(typing.get_origin(a) is tuple for a in (annotation, *typing.get_args(annotation)))


OptionsT = TypeVar("OptionsT", bound=Options)
