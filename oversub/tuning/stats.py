"""`oversub tune`'s statistics: each candidate's mean, spread and 95 % interval, whether two
intervals overlap, how many runs would part them, and the speed-up of one over another.

The textbook model (hyperfine's): per candidate the mean, the sample standard deviation, min,
max and the 95 % interval of the mean with Student's t. Pure, standard library only.

The figures are CMD's (`--metric`): any finite double, hostile or absurd ones included
(`m=1e308`, `1e-300` against `1e300`). Nothing here may raise on them or turn a finite mean
into inf or NaN:
- a candidate's figures are scaled by a power of two (exact) so that the largest is below 1
  before their mean and deviation are taken, and scaled back; a mean, min and max are always
  finite; a deviation or half width beyond the largest double (only from figures near it)
  is `math.inf`, which the renderers state as such;
- differences and sums of two means or spreads are taken in halves;
- a speed-up is a quotient of two finite means: beyond `RATIO_LIMIT` either way (or inf) it is
  stated as such (`trials.beyond`), and has no interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from oversub.tuning.trials import Stats, beyond

MAX_SEPARATING_RUNS = 100_000
"""Beyond this many runs each, two candidates count as inseparable."""

_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
"""Student's t, two-sided 95 % (the 0.975 quantile), for 1 to 30 degrees of freedom."""


def t975(df: int) -> float:
    """Student's t 0.975 quantile for `df` >= 1 degrees of freedom: the table to 30, then the
    Cornish-Fisher expansion around the normal quantile (within 0.001 of the exact value)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = statistics.NormalDist().inv_cdf(0.975)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


def _unscale(x: float, exponent: int) -> float:
    """x * 2**exponent, or +-inf when that is beyond the largest double."""
    try:
        return math.ldexp(x, exponent)
    except OverflowError:
        return math.copysign(math.inf, x)


def describe(values: Sequence[float]) -> Stats | None:
    """Mean, sample sd, min, max and the 95 % half width of `values` (finite figures); None
    when empty. The sd and half width are `math.inf` when beyond the largest double."""
    if not values:
        return None
    top = max(abs(v) for v in values)
    # top = f * 2**e with 0.5 <= f < 1: every scaled figure is below 1 in size, so no sum of
    # them (fmean's, stdev's) overflows; scaling by a power of two changes no digit (a figure
    # 2**1074 times smaller than the largest is lost, as it is in their sum).
    exponent = math.frexp(top)[1] if top > 0 else 0
    scaled = [math.ldexp(v, -exponent) for v in values]
    mean = _unscale(statistics.fmean(scaled), exponent)
    if len(values) < 2:
        return Stats(1, mean, None, values[0], values[0], None)
    sd = statistics.stdev(scaled)
    half = t975(len(values) - 1) * sd / math.sqrt(len(values))
    return Stats(
        len(values),
        mean,
        _unscale(sd, exponent),
        min(values),
        max(values),
        _unscale(half, exponent),
    )


def overlap(a: Stats, b: Stats) -> bool:
    """The two intervals overlap. With a single figure on either side nothing tells them
    apart: that counts as overlapping. (An infinite half width overlaps everything.)"""
    if a.half is None or b.half is None:
        return True
    return a.low <= b.high and b.low <= a.high


def runs_to_separate(a: Stats, b: Stats) -> int | None:
    """Timed runs each candidate would need for the two intervals to part, at the spread and
    difference measured; None when they are equal, no spread is known, or more than
    `MAX_SEPARATING_RUNS` would be needed."""
    if a.sd is None or b.sd is None:
        return None
    # In halves: the difference of two finite means and the sum of two finite spreads fit.
    gap = abs(a.mean / 2 - b.mean / 2)
    spread = a.sd / 2 + b.sd / 2
    if gap <= 0 or not math.isfinite(spread):
        return None
    if spread <= 0:
        return max(a.n, b.n)

    def parts(n: int) -> bool:
        return t975(n - 1) * spread / math.sqrt(n) < gap

    if not parts(MAX_SEPARATING_RUNS):
        return None
    low, high = 2, MAX_SEPARATING_RUNS  # t(n-1)/sqrt(n) falls with n: the first n that parts
    while low < high:
        middle = (low + high) // 2
        if parts(middle):
            high = middle
        else:
            low = middle + 1
    return low


def throughput_ratio(
    a: Stats, b: Stats, higher_is_better: bool
) -> tuple[float | None, float | None]:
    """a's throughput over b's (>1: a is faster) and its propagated 95 % half width.

    None when either mean is not positive (no throughput to compare). The ratio may be inf
    or 0 for absurd figures; beyond `RATIO_LIMIT` either way it has no half width. The half
    width may be inf (intervals far wider than their means)."""
    if a.mean <= 0 or b.mean <= 0:
        return None, None
    ratio = a.mean / b.mean if higher_is_better else b.mean / a.mean  # inf or 0, never raises
    if a.half is None or b.half is None or beyond(ratio) is not None:
        return ratio, None
    relative = math.hypot(a.half / a.mean, b.half / b.mean)
    return ratio, ratio * relative
