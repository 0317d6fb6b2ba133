"""What numerics can explain: greedy replies of a correct speculative engine against the baseline's.

Verifying a batch of drafted tokens sums in another order than decoding one token at a time, so
a near-tie between the two likeliest tokens can flip, and a greedy reply can then go its own way.
That happens rarely and anywhere in a reply, not in every reply from its first tokens. The model
stated here: numerics flip a token at most once per 1/FLIP_RATE = 100 tokens (about twice the
worst rate seen on this project's testbed, where 4 of 8 Q4 replies of 128 tokens diverged
somewhere at k = 4). For each reply the divergence from the baseline's reply (same prompt) is
located (in tokens, from the characters they share), so the replies expose sum(tokens up to and
including the first difference, or the whole reply when identical) tokens to flips, and the
number of divergences under the model is at most Poisson(FLIP_RATE x exposure). A p-value at or
below LEVEL (1%) is more, or earlier, divergence than numerics can explain. Example: 3 of 3
replies diverging at tokens 1, 3 and 6 expose 13 tokens, p = 3e-4; 4 of 8 replies of 96 tokens
diverging at tokens 30, 50, 70 and 90 expose 628 tokens, p = 0.87.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

FLIP_RATE = 0.01  # numerics flip at most one greedy token per 100 (per-token rate bound)
LEVEL = 0.01  # more divergence than that with p <= 1%: the output changed
EARLY = 8  # the share identical through the first EARLY tokens is reported alongside


@dataclass(frozen=True)
class Greedy:
    """Greedy replies of one side against the baseline's, read against the numerics model."""

    n: int
    identical: int
    early: int  # replies that differ within their first EARLY tokens
    starts: tuple[float, ...]  # where each differing reply diverges (tokens, approximate)
    exposure: float  # tokens exposed to a flip
    p_value: float

    @property
    def explained(self) -> bool:
        return self.p_value > LEVEL

    def message(self) -> str:
        if not self.n:
            return "no replies to compare"
        same = f"{self.identical}/{self.n} identical to the baseline's"
        if not self.starts:
            return f"{same}: numerics explain it"
        where = ", ".join(f"{s:.0f}" for s in sorted(self.starts)[:6])
        more = ", ..." if len(self.starts) > 6 else ""
        words = "numerics explain it" if self.explained else "more or earlier than numerics " \
                                                              "explain"
        return (f"{same}; the others diverge at about token {where}{more} "
                f"({self.early}/{self.n} within the first {EARLY} tokens; p={self.p_value:.2g}): "
                f"{words}")

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "identical": self.identical, "early": self.early,
                "starts": [round(s, 1) for s in self.starts], "exposure": round(self.exposure, 1),
                "p_value": self.p_value, "explained": self.explained, "message": self.message()}


def divergence(text: str, base: str, base_tokens: int) -> float | None:
    """Where `text` leaves `base`, in tokens (from the characters they share and the baseline's
    characters per token); None when they are identical."""
    if text == base:
        return None
    shared = next((i for i, (a, b) in enumerate(zip(text, base, strict=False)) if a != b),
                  min(len(text), len(base)))
    per_token = len(base) / base_tokens if base and base_tokens > 0 else 4.0
    return shared / max(per_token, 1e-9)


def greedy(pairs: Iterable[tuple[str, str, int]]) -> Greedy:
    """(reply, baseline reply, baseline tokens) per prompt, tested against the numerics model."""
    from scipy import stats

    n = identical = early = 0
    starts: list[float] = []
    exposure = 0.0
    for text, base, tokens in pairs:
        n += 1
        start = divergence(text, base, tokens)
        if start is None:
            identical += 1
            exposure += max(tokens, 1)
            continue
        starts.append(start)
        early += start < EARLY
        exposure += start + 1  # the tokens up to and including the one that differs
    p = float(stats.poisson.sf(len(starts) - 1, FLIP_RATE * exposure)) if starts else 1.0
    return Greedy(n, identical, early, tuple(starts), exposure, p)
