"""Draft counters, as a backend reads them from its server."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpecStats:
    """Draft counters. `drafts` = verification steps that had a draft."""

    drafted: int = 0
    accepted: int = 0
    drafts: int = 0
    per_position: tuple[int, ...] = ()
    source: str = ""

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Accepted draft tokens per verification step (plus one target token each step)."""
        return self.accepted / self.drafts if self.drafts else None

    def __add__(self, other: SpecStats) -> SpecStats:
        n = max(len(self.per_position), len(other.per_position))
        a = self.per_position + (0,) * (n - len(self.per_position))
        b = other.per_position + (0,) * (n - len(other.per_position))
        summed = tuple(x + y for x, y in zip(a, b, strict=True))
        return SpecStats(self.drafted + other.drafted, self.accepted + other.accepted,
                         self.drafts + other.drafts, summed, self.source or other.source)

    def __sub__(self, before: SpecStats) -> SpecStats:
        neg = SpecStats(-before.drafted, -before.accepted, -before.drafts,
                        tuple(-x for x in before.per_position), before.source)
        return self + neg
