"""Another tool's store of models (e.g. a backend's own), reachable as `SCHEME:name`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from specctl.orchestrator.errors import ModelError
from specctl.orchestrator.humanize import Say


class ModelStore:
    """Another tool's store of models, reachable as `SCHEME:name` references."""

    scheme: ClassVar[str]

    def normalize(self, name: str) -> str:
        """The name as the store spells it (e.g. with its default tag); raises ModelError."""
        return name

    def locate(self, name: str) -> Path | None:
        """The model file, None when the store does not have it."""
        raise NotImplementedError

    def models(self) -> Iterator[tuple[str, Path]]:
        """(name, file) of every model in the store (draft candidates)."""
        raise NotImplementedError

    def how_to_get(self, name: str) -> str:
        raise NotImplementedError

    def pull(self, name: str, say: Say) -> Path:
        """Fetch the model through its tool (when it can), then its file."""
        raise ModelError(f"{self.scheme}:{name}: specctl cannot fetch it; {self.how_to_get(name)}")
