"""Does speculative decoding change what the model says? Two-sample tests for `bench --quality`.

A correct speculative engine (draft proposes, target verifies with rejection sampling) produces
exactly the target's output distribution. `bench --quality` samples a baseline server (target
alone) and a candidate server (speculative) at the same temperature/top-p on the same prompts,
many short completions each, and hands the samples of one category to `compare`.

Null hypothesis H0: for every prompt, the baseline's and the candidate's completions are
independent draws from one and the same distribution. Under H0 the samples of a prompt are
exchangeable between the two sides, so every test here is a **permutation test**: the side labels
are shuffled between whole completions, within each prompt (stratified), and the observed
statistic is ranked among the shuffled ones. This is exact at any sample size (p-values are
valid: P(p <= a) <= a under H0, no large-sample approximation) and it keeps every dependence
between the token positions of one completion, so no independence is assumed anywhere. The
p-values have the resolution 1/(permutations + 1).

Two families of evidence:

* Token frequencies. For each (prompt, position j) the marginal token at position j given only
  the prompt is tabulated as a 2xK table (baseline vs candidate counts). Completions shorter than
  the window are padded with an end-of-text bin, so a change in length is visible too. Tokens
  seen fewer than `min_bin_count` times in the pooled (both sides) column share one "other" bin
  (kept however small: that is where new tokens from a broken engine land). Binning looks only at
  pooled counts, which a permutation does not change, so it cannot bias the test; small expected
  counts cost the Pearson statistic nothing here, its null distribution is the permutation one.
  Two statistics combine the cells: the **sum** of all chi-squares (powerful against a diffuse
  shift: a leaking draft or a wrong residual touches every speculated position) and the
  **maximum** of the cells' Wilson-Hilferty normal scores (powerful against a shift at one
  position). The family p is the permutation p of min(p_sum / 0.8, p_max / 0.2), calibrated on
  the same permutations (a weighted "minP" combination; at most 0.8 alpha / 0.2 alpha of the
  level goes to each, so rejecting on p_sum <= 0.8 alpha alone would already be valid). p_max is
  the Westfall-Young single-step adjusted p of the strongest cell: family-wise error control over
  all cells under any dependence between them, never weaker than Bonferroni. Holm or Bonferroni
  over per-cell asymptotic chi-square p-values would need tail probabilities near 0.05/100 from
  tables of 20-60 samples a side, where the asymptotics are poor, and would give up the power of
  pooling a diffuse shift; the weighting favours the sum because the failures that matter are
  diffuse (measured: 0.8 of the level to the sum keeps ~95% of the sum-only power).
* Target log-likelihood. Per sample, the mean log-likelihood of its tokens under the target (as
  scored by the baseline server). A draft leaking into the output moves it (samples that the
  target finds less likely). Statistic: the stratified Wilcoxon rank-sum (van Elteren:
  within-prompt ranks, weight 1/(n+1) per prompt), two-sided, permutation-calibrated. It does
  not see a wrong residual distribution well (that bug hardly moves the likelihood); the token
  family does.

Verdict: Bonferroni over the families that have data (m of them, 1 or 2),
p = min(1, m * min(p_tokens, p_loglik)), "differs" when p <= alpha. The false-alarm rate of the
verdict is therefore at most alpha, exactly and at any sample size (measured on synthetic data
with dependent positions: 0.045 over 1000 trials at alpha = 0.05).

Minimum detectable shift (analytic, from the realized table sizes, not from the outcome): for a
2xK table with n1, n2 samples and side distributions p, q the Pearson noncentrality is
n_eff * sum((p - q)^2 / r), n_eff = n1 n2 / (n1 + n2), r the pooled distribution; by
Cauchy-Schwarz that is at least 4 * n_eff * TV(p, q)^2 whatever the direction of the shift. So a
shift of total variation d at every position of every prompt gives the sum statistic a noncentral
chi-square with noncentrality >= 4 d^2 sum(n_eff); `min_detectable_tv` solves for the d with
power `power` at level 0.8 * alpha / m. A worst-case-direction, large-sample figure: measured,
a shift of exactly that size in the worst direction is detected in ~0.88 of trials at a promised
0.8. Shifts are in the binned marginal at each position; a mixture candidate =
(1 - eps) baseline + eps other has TV = eps * TV(baseline, other). Note that real engines sample
the first token from the target alone, so position 0 cannot differ. For the log-likelihood the
normal-approximation shift in mean nats/token is reported likewise.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

Token: TypeAlias = "str | int"
FloatArray: TypeAlias = "npt.NDArray[np.float64]"
IntArray: TypeAlias = "npt.NDArray[np.intp]"

DIFFERS = "differs"
NO_DIFFERENCE = "no difference detected"
INSUFFICIENT = "insufficient data"

SUM_WEIGHT = 0.8  # share of the token family's level spent on the sum statistic (rest: max)
_END = ("<end of text>",)  # padding for completions shorter than the window; no token equals it
_OTHER = -1


@dataclass(frozen=True)
class PromptSamples:
    """One prompt's completions from both servers (same prompt, temperature and top-p).

    Each sample is the first tokens of one completion (token strings or ids). The log-likelihood
    lists, when given, hold each sample's mean log-likelihood per token under the target, in the
    same order as the samples; NaN marks a sample that could not be scored.
    """

    baseline: Sequence[Sequence[Token]]
    candidate: Sequence[Sequence[Token]]
    baseline_loglik: Sequence[float] | None = None
    candidate_loglik: Sequence[float] | None = None
    label: str = ""


@dataclass(frozen=True)
class CellFinding:
    """The (prompt, position) cell with the largest standardized chi-square; indices 0-based."""

    prompt: int
    label: str
    position: int
    chi_square: float
    df: int
    raw_p: float  # that cell's own asymptotic chi-square p, not corrected for multiplicity
    adjusted_p: float  # family-wise (Westfall-Young max-statistic permutation) p

    def where(self) -> str:
        name = f"'{self.label}'" if self.label else f"#{self.prompt}"
        return f"position {self.position} of prompt {name}"


@dataclass(frozen=True)
class TokenTest:
    """Token-frequency family: permutation p of the minP combination of sum and max statistics."""

    p_value: float
    p_sum: float
    p_max: float
    chi_square: float  # sum over tested cells
    df: int
    cells_tested: int  # cells with at least two bins
    cells: int  # cells with samples on both sides (tested or degenerate)
    strongest: CellFinding | None
    min_detectable_tv: float | None  # None: nothing to detect with (no cells)


@dataclass(frozen=True)
class LoglikTest:
    """Log-likelihood family: stratified rank-sum permutation test, two-sided."""

    p_value: float
    mean_shift: float  # candidate minus baseline, nats/token, n_eff-weighted over prompts
    prompts: int
    baseline_samples: int
    candidate_samples: int
    min_detectable_shift: float | None  # nats/token, power `power` at the family's level


@dataclass(frozen=True)
class QualityResult:
    """The verdict for one category, with everything needed to read it."""

    category: str
    verdict: str  # DIFFERS, NO_DIFFERENCE or INSUFFICIENT
    p_value: float  # Bonferroni-combined over the families with data
    alpha: float
    power: float
    prompts: int  # prompts with samples on both sides
    baseline_samples: int
    candidate_samples: int
    positions: int
    permutations: int
    tokens: TokenTest | None
    loglik: LoglikTest | None

    @property
    def differs(self) -> bool:
        return self.verdict == DIFFERS

    @property
    def min_p(self) -> float:
        """The smallest uncorrected family p-value (1.0 when nothing was tested)."""
        ps = [t.p_value for t in (self.tokens, self.loglik) if t is not None]
        return min(ps, default=1.0)

    def message(self) -> str:
        if self.verdict == INSUFFICIENT:
            return "insufficient data (no prompt has samples from both servers)"
        p = _fmt_p(self.p_value, self.permutations, self._families())
        if self.differs:
            return f"distributions differ ({p}; {self._evidence()})"
        plural = "" if self.prompts == 1 else "s"
        sizes = (f"{self.prompts} prompt{plural}, {self.baseline_samples} baseline and "
                 f"{self.candidate_samples} speculative samples")
        return f"no difference detected ({p}; {self._sensitivity()} at this sample size: {sizes})"

    def to_json(self) -> dict[str, Any]:
        tokens = self.tokens
        loglik = self.loglik
        strongest = tokens.strongest if tokens is not None else None
        return {
            "category": self.category, "verdict": self.verdict, "message": self.message(),
            "p_value": self.p_value, "min_p": self.min_p, "alpha": self.alpha,
            "power": self.power, "prompts": self.prompts,
            "baseline_samples": self.baseline_samples,
            "candidate_samples": self.candidate_samples, "positions": self.positions,
            "permutations": self.permutations,
            "tokens": None if tokens is None else {
                "p_value": tokens.p_value, "p_sum": tokens.p_sum, "p_max": tokens.p_max,
                "chi_square": tokens.chi_square, "df": tokens.df,
                "cells_tested": tokens.cells_tested, "cells": tokens.cells,
                "min_detectable_tv": tokens.min_detectable_tv,
                "strongest": None if strongest is None else {
                    "prompt": strongest.prompt, "label": strongest.label,
                    "position": strongest.position, "chi_square": strongest.chi_square,
                    "df": strongest.df, "raw_p": strongest.raw_p,
                    "adjusted_p": strongest.adjusted_p,
                },
            },
            "loglik": None if loglik is None else {
                "p_value": loglik.p_value, "mean_shift": loglik.mean_shift,
                "prompts": loglik.prompts, "baseline_samples": loglik.baseline_samples,
                "candidate_samples": loglik.candidate_samples,
                "min_detectable_shift": loglik.min_detectable_shift,
            },
        }

    def _families(self) -> int:
        return sum(t is not None for t in (self.tokens, self.loglik))

    def _evidence(self) -> str:
        tokens, loglik = self.tokens, self.loglik
        if loglik is not None and (tokens is None or loglik.p_value < tokens.p_value):
            way = "less" if loglik.mean_shift < 0 else "more"
            return (f"speculative samples are {abs(loglik.mean_shift):.3g} nats/token {way} "
                    "likely under the target")
        if tokens is not None and tokens.strongest is not None:
            if tokens.p_max <= tokens.p_sum:
                return f"strongest at {tokens.strongest.where()}"
            return (f"token frequencies differ over {tokens.cells_tested} (prompt, position) "
                    f"cells, most at {tokens.strongest.where()}")
        return "token frequencies"

    def _sensitivity(self) -> str:
        parts = []
        blind = ""
        if self.tokens is not None and self.tokens.min_detectable_tv is not None:
            tv = self.tokens.min_detectable_tv
            if tv < 1.0:
                parts.append(f"a shift of {tv:.2g} in total variation per token position")
            else:
                blind = "too few samples to detect even a complete change of the tokens"
        if self.loglik is not None and self.loglik.min_detectable_shift is not None:
            parts.append(f"{self.loglik.min_detectable_shift:.2g} nats/token in mean target "
                         "log-likelihood")
        if not parts:
            return blind or "nothing measurable"
        could = f"could have detected {' or '.join(parts)} with power {self.power:g}"
        return f"{blind}; {could}" if blind else could


def compare(prompts: Sequence[PromptSamples], *, alpha: float = 0.05, power: float = 0.8,
            positions: int | None = None, permutations: int = 1999, min_bin_count: int = 4,
            seed: int = 0, category: str = "") -> QualityResult:
    """Test one category's baseline samples against its candidate samples; see the module doc.

    `positions` is the token window (default: the longest sample). Deterministic for a seed.
    """
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError("alpha and power must lie strictly between 0 and 1")
    if permutations < 1:
        raise ValueError("need at least one permutation")
    if positions is not None and positions < 0:
        raise ValueError("positions must not be negative")
    both = [p for p in prompts if p.baseline and p.candidate]
    window = positions if positions is not None else max(
        (len(s) for p in both for s in (*p.baseline, *p.candidate)), default=0)
    has_ll = any(_loglik_pair(p) is not None for p in both)
    families = (1 if both else 0) + (1 if has_ll else 0)
    token_seed, ll_seed = np.random.SeedSequence(seed).spawn(2)
    level = alpha / max(families, 1)
    tokens = None if not both else token_test(
        both, positions=window, permutations=permutations, min_bin_count=min_bin_count,
        rng=np.random.default_rng(token_seed), alpha=level, power=power)
    loglik = None if not has_ll else loglik_test(
        both, permutations=permutations, rng=np.random.default_rng(ll_seed), alpha=level,
        power=power)
    ps = [t.p_value for t in (tokens, loglik) if t is not None]
    p_value = min(1.0, families * min(ps)) if ps else 1.0
    verdict = INSUFFICIENT if not ps else DIFFERS if p_value <= alpha else NO_DIFFERENCE
    return QualityResult(
        category=category, verdict=verdict, p_value=p_value, alpha=alpha, power=power,
        prompts=len(both), baseline_samples=sum(len(p.baseline) for p in both),
        candidate_samples=sum(len(p.candidate) for p in both), positions=window,
        permutations=permutations, tokens=tokens, loglik=loglik)


# -- token frequencies --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Tables:
    """One prompt's binned cells as a one-hot matrix: rows = samples (baseline first)."""

    onehot: npt.NDArray[np.float32]  # samples x columns, columns grouped by cell (0/1)
    starts: IntArray  # first column of each tested cell
    positions: list[int]  # window position of each tested cell
    dfs: list[int]
    n_base: int
    n_cand: int
    degenerate: int  # cells with samples but a single bin


def token_test(prompts: Sequence[PromptSamples], *, positions: int, permutations: int = 1999,
               min_bin_count: int = 4, rng: np.random.Generator | None = None,
               alpha: float = 0.05, power: float = 0.8) -> TokenTest:
    """Permutation test of the per-(prompt, position) token frequencies; `alpha` and `power`
    only size the minimum detectable shift. Prompts lacking either side are ignored."""
    rng = rng if rng is not None else np.random.default_rng(0)
    rows: list[FloatArray] = []  # per prompt: (permutations + 1) x cells chi-squares
    where: list[tuple[int, int]] = []
    dfs: list[int] = []
    n_effs: list[float] = []
    mds_dfs: list[int] = []
    for index, prompt in enumerate(prompts):
        if not prompt.baseline or not prompt.candidate:
            continue
        tables = _tabulate(prompt, positions, min_bin_count)
        n_eff = tables.n_base * tables.n_cand / (tables.n_base + tables.n_cand)
        n_effs += [n_eff] * (len(tables.dfs) + tables.degenerate)
        mds_dfs += tables.dfs + [1] * tables.degenerate  # a shift would open a second bin
        if tables.dfs:
            labels = _shuffled_labels(tables.n_base, tables.n_cand, permutations, rng)
            rows.append(_chi_squares(tables, labels))
            where += [(index, j) for j in tables.positions]
            dfs += tables.dfs
    mdtv = min_detectable_tv(n_effs, mds_dfs, alpha * SUM_WEIGHT, power)
    if not rows:
        return TokenTest(p_value=1.0, p_sum=1.0, p_max=1.0, chi_square=0.0, df=0,
                         cells_tested=0, cells=len(n_effs), strongest=None,
                         min_detectable_tv=mdtv)
    stats = np.concatenate(rows, axis=1)
    df = np.asarray(dfs, dtype=np.float64)
    p_sum = _upper_p(stats.sum(axis=1))
    z = _wilson_hilferty(stats, df)
    p_max = _upper_p(z.max(axis=1))
    p_min = np.minimum(p_sum / SUM_WEIGHT, p_max / (1.0 - SUM_WEIGHT))
    p_value = float(np.count_nonzero(p_min <= p_min[0] * (1 + 1e-9))) / len(p_min)
    cell = int(np.argmax(z[0]))
    prompt_index, position = where[cell]
    strongest = CellFinding(
        prompt=prompt_index, label=prompts[prompt_index].label, position=position,
        chi_square=float(stats[0, cell]), df=dfs[cell],
        raw_p=_chi2_sf(float(stats[0, cell]), dfs[cell]), adjusted_p=float(p_max[0]))
    return TokenTest(p_value=p_value, p_sum=float(p_sum[0]), p_max=float(p_max[0]),
                     chi_square=float(stats[0].sum()), df=int(sum(dfs)),
                     cells_tested=len(dfs), cells=len(n_effs), strongest=strongest,
                     min_detectable_tv=mdtv)


def _window(sample: Sequence[Token], positions: int) -> list[object]:
    head: list[object] = list(sample[:positions])
    return head + [_END] * (positions - len(head))


def _tabulate(prompt: PromptSamples, positions: int, min_bin_count: int) -> _Tables:
    samples = [_window(s, positions) for s in (*prompt.baseline, *prompt.candidate)]
    blocks: list[npt.NDArray[np.float32]] = []
    starts: list[int] = []
    cells: list[int] = []
    dfs: list[int] = []
    degenerate = 0
    column = 0
    for j in range(positions):
        codes = _bin_codes([s[j] for s in samples], min_bin_count)
        bins = int(codes.max()) + 1
        if bins < 2:
            degenerate += 1
            continue
        blocks.append(np.eye(bins, dtype=np.float32)[codes])
        starts.append(column)
        cells.append(j)
        dfs.append(bins - 1)
        column += bins
    onehot = np.zeros((len(samples), 0), dtype=np.float32)
    if blocks:
        onehot = np.concatenate(blocks, axis=1)
    return _Tables(onehot=onehot, starts=np.asarray(starts, dtype=np.intp), positions=cells,
                   dfs=dfs, n_base=len(prompt.baseline), n_cand=len(prompt.candidate),
                   degenerate=degenerate)


def _bin_codes(tokens: Sequence[object], min_bin_count: int) -> IntArray:
    """Bin index per sample: one bin per token seen >= min_bin_count times (pooled), then one
    shared bin for the rest (kept even when small: under permutation a small column adds an
    almost constant amount, and it is where a new token from a broken engine shows up)."""
    counts = Counter(tokens)
    common = [t for t, c in counts.most_common() if c >= min_bin_count]
    code = {t: i for i, t in enumerate(common)}
    other = len(common)
    return np.asarray([code.get(t, other) for t in tokens], dtype=np.intp)


def _shuffled_labels(n_base: int, n_cand: int, permutations: int,
                     rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """Row 0: the observed labels (1 = candidate); rows 1..: independent shuffles of them.
    float32 because the counts they make stay exact (< 2**24) and the products run 5x faster."""
    observed = np.concatenate([np.zeros(n_base, np.float32), np.ones(n_cand, np.float32)])
    shuffled = rng.permuted(np.tile(observed, (permutations, 1)), axis=1)
    return np.vstack([observed, shuffled])


def _chi_squares(tables: _Tables, labels: npt.NDArray[np.float32]) -> FloatArray:
    """Pearson chi-square of every tested cell under every labelling: rows x cells.

    For a 2xK table with row totals n1, n2 (N = n1 + n2) and column totals t, the candidate row
    a alone determines it: X^2 = sum_k (a_k - n2 t_k / N)^2 N^2 / (t_k n1 n2)."""
    n1, n2 = tables.n_base, tables.n_cand
    n = n1 + n2
    totals = tables.onehot.sum(axis=0, dtype=np.float64)
    cand = (labels @ tables.onehot).astype(np.float64)
    terms = (cand - n2 * totals / n) ** 2 * (n * n / (totals * n1 * n2))
    result: FloatArray = np.add.reduceat(terms, tables.starts, axis=1)
    return result


def _wilson_hilferty(chi_square: FloatArray, df: FloatArray) -> FloatArray:
    """Chi-square with df degrees of freedom to an approximate standard normal score: puts cells
    of different df on one scale for the max statistic (the permutation makes it exact)."""
    scale = 2.0 / (9.0 * df)
    z: FloatArray = (np.cbrt(chi_square / df) - (1.0 - scale)) / np.sqrt(scale)
    return z


def _upper_p(values: FloatArray) -> FloatArray:
    """For each entry, the fraction of entries >= it (itself included): the permutation p of
    every row as if it were the observed one. Ties within a relative 1e-9 count as equal."""
    ordered = np.sort(values)
    tolerance = 1e-9 * np.maximum(1.0, np.abs(values))
    below = np.searchsorted(ordered, values - tolerance, side="left")
    p: FloatArray = (len(values) - below) / len(values)
    return p


def _scipy_stats() -> Any:
    """scipy.stats, imported on first use so that importing this module stays cheap. scipy ships
    no type information (hence Any; the ignore stays quiet should scipy-stubs be installed)."""
    from scipy import stats

    return stats


def _scipy_optimize() -> Any:
    from scipy import optimize

    return optimize


def _chi2_sf(x: float, df: int) -> float:
    return float(_scipy_stats().chi2.sf(x, df))


def min_detectable_tv(n_effs: Sequence[float], dfs: Sequence[int], alpha: float,
                      power: float) -> float | None:
    """Smallest total-variation shift, applied at every cell, that the sum-of-chi-squares test at
    level `alpha` detects with probability `power`, in the direction hardest to see
    (noncentrality 4 * n_eff * TV^2 per cell). One entry per cell. Capped at 1.0 (nothing
    smaller is detectable); None when there is no cell."""
    stats, optimize = _scipy_stats(), _scipy_optimize()
    total_df = int(sum(dfs))
    weight = 4.0 * float(sum(n_effs))
    if total_df == 0 or weight == 0.0:
        return None
    critical = float(stats.chi2.isf(alpha, total_df))

    def shortfall(noncentrality: float) -> float:
        return float(stats.ncx2.sf(critical, total_df, noncentrality)) - power

    if shortfall(weight) < 0.0:  # noncentrality at TV = 1 is `weight`
        return 1.0
    noncentrality = float(optimize.brentq(shortfall, 1e-9, weight, xtol=1e-9))
    return min(1.0, math.sqrt(noncentrality / weight))


# -- target log-likelihood ----------------------------------------------------------------------


def _loglik_pair(prompt: PromptSamples) -> tuple[FloatArray, FloatArray] | None:
    """The finite log-likelihoods of both sides, or None when a side has none."""
    pairs = ((prompt.baseline_loglik, prompt.baseline), (prompt.candidate_loglik,
                                                          prompt.candidate))
    sides: list[FloatArray] = []
    for values, samples in pairs:
        if values is None:
            return None
        if len(values) != len(samples):
            raise ValueError(f"prompt {prompt.label!r}: {len(values)} log-likelihoods for "
                             f"{len(samples)} samples")
        array = np.asarray(values, dtype=np.float64)
        sides.append(array[np.isfinite(array)])
    if not len(sides[0]) or not len(sides[1]):
        return None
    return sides[0], sides[1]


def loglik_test(prompts: Sequence[PromptSamples], *, permutations: int = 1999,
                rng: np.random.Generator | None = None, alpha: float = 0.05,
                power: float = 0.8) -> LoglikTest | None:
    """Stratified (van Elteren) rank-sum permutation test of the per-sample mean target
    log-likelihood, two-sided; None when no prompt has scores on both sides. `alpha` and `power`
    only size the minimum detectable shift."""
    stats = _scipy_stats()
    rng = rng if rng is not None else np.random.default_rng(0)
    total = np.zeros(permutations + 1)
    shift = weight = variance = 0.0
    n_base = n_cand = used = 0
    for prompt in prompts:
        pair = _loglik_pair(prompt)
        if pair is None:
            continue
        base, cand = pair
        n = len(base) + len(cand)
        ranks = np.asarray(stats.rankdata(np.concatenate([base, cand])), dtype=np.float64)
        labels = _shuffled_labels(len(base), len(cand), permutations, rng)
        total += (labels.astype(np.float64) @ ranks - len(cand) * (n + 1) / 2) / (n + 1)
        n_eff = len(base) * len(cand) / n
        shift += n_eff * float(cand.mean() - base.mean())
        weight += n_eff
        variance += n_eff * _pooled_variance(base, cand)
        n_base, n_cand, used = n_base + len(base), n_cand + len(cand), used + 1
    if not used:
        return None
    z = float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))
    return LoglikTest(p_value=float(_upper_p(np.abs(total))[0]), mean_shift=shift / weight,
                      prompts=used, baseline_samples=n_base, candidate_samples=n_cand,
                      min_detectable_shift=z * math.sqrt(variance) / weight if variance > 0
                      else None)


def _pooled_variance(a: FloatArray, b: FloatArray) -> float:
    dof = len(a) + len(b) - 2
    if dof <= 0:
        return 0.0
    return float(((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / dof


def _fmt_p(p: float, permutations: int, families: int) -> str:
    floor = families / (permutations + 1)
    if p <= floor * (1 + 1e-9):
        return f"p<={floor:.2g}"
    return f"p={p:.2g}"
