"""95% confidence intervals for accuracies: every accuracy the suite reports carries one.

An accuracy is the mean of per-example correctness in [0, 1] over n examples. With n = 40 its
95% interval is roughly ±15 pp, which is why a leaderboard difference of a few points between
two small evaluations means nothing.

- Correctness in {0, 1} (a deterministic model): the Wilson score interval (Wilson, 1927), which
  keeps its coverage near 0 and 1, where the normal approximation collapses to a point.
- Fractional correctness (a randomized model's exact expected accuracy per example): a seeded
  percentile bootstrap over examples, so the same values give the same interval everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: Two-sided 95% normal quantile.
Z95 = 1.959963984540054
BOOTSTRAP_RESAMPLES = 2000


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for ``successes`` out of ``n`` (``(0, 1)`` when ``n`` is 0)."""
    if n <= 0:
        return (0.0, 1.0)
    p = min(max(successes / n, 0.0), 1.0)
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    # The interval always holds p (rounding could put p = 1 a hair above its upper end).
    return (max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)))


def bootstrap_interval(values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (seeded: deterministic)."""
    import numpy as np

    data = np.asarray(values, dtype=np.float64)
    n = len(data)
    if n == 0:
        return (0.0, 1.0)
    rng = np.random.default_rng(seed)
    chunk = max(1, 2_000_000 // n)  # resamples per draw: bounded memory for large n
    means = np.concatenate([data[rng.integers(0, n, size=(min(chunk, resamples - start), n))].mean(axis=1)
                            for start in range(0, resamples, chunk)])
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    mean = float(data.mean())  # the interval holds its estimate, as Wilson's does (checked by verify.py)
    return (min(float(low), mean), max(float(high), mean))


def accuracy_interval(values: Sequence[float]) -> tuple[float, float]:
    """95% interval of the mean correctness ``values``: Wilson for 0/1 values, else bootstrap."""
    values = [float(value) for value in values]
    if all(value in (0.0, 1.0) for value in values):
        return wilson_interval(sum(values), len(values))
    return bootstrap_interval(values)
