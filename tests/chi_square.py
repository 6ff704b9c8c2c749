"""Pearson's chi-square goodness of fit for the sampler's distribution tests (CPU and GPU).

``chi_square(counts, probs)`` -> (statistic, degrees of freedom, p-value). Bins whose expected count
is below 5 are pooled into one (the test's usual condition). The p-value comes from scipy.stats when
scipy is installed, else from the Wilson-Hilferty normal approximation of the chi-square law.
"""

from __future__ import annotations

import math

import numpy as np

MIN_EXPECTED = 5.0


def _pool(counts, probs):
    counts = np.asarray(counts, np.float64)
    expected = np.asarray(probs, np.float64) * counts.sum()
    small = expected < MIN_EXPECTED
    obs, exp = list(counts[~small]), list(expected[~small])
    if expected[small].sum() > 0:  # ids of probability 0 are left out (a draw of one is checked exactly)
        obs.append(counts[small].sum())
        exp.append(expected[small].sum())
    return np.array(obs), np.array(exp)


def wilson_hilferty_sf(x: float, k: int) -> float:
    """P(chi2_k >= x) by the Wilson-Hilferty cube-root normal approximation."""
    if x <= 0:
        return 1.0
    z = ((x / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))


def chi_square(counts, probs) -> tuple[float, int, float]:
    """counts [V] (draws per id), probs [V] (the exact distribution) -> (statistic, dof, p-value)."""
    obs, exp = _pool(counts, probs)
    dof = len(obs) - 1
    if dof < 1:
        return 0.0, 0, 1.0
    stat = float(((obs - exp) ** 2 / exp).sum())
    try:
        from scipy.stats import chi2
    except ImportError:
        return stat, dof, wilson_hilferty_sf(stat, dof)
    return stat, dof, float(chi2.sf(stat, dof))
