"""Moving-block bootstrap of a non-negative least-squares fit over rows in time order.

Neighbouring rows share refresh edges (a counter value ends one interval and starts the next)
and the jitter's errors are heavy-tailed near power steps, so rows are resampled in blocks of
consecutive rows. Prefix sums of each row's AᵀA and Aᵀb make every resample an NNLS of the size
of the number of phases, through the Cholesky factor of its Gram matrix.
"""

from __future__ import annotations

import numpy as np

from jouleprof.attribution.nnls import nnls_gram

_MIN_BLOCKS = 10  # resample at least this many blocks, or the bootstrap has nothing to vary


def residual_block_s(
    mid_s: np.ndarray, resid: np.ndarray, min_block_s: float, bin_s: float = 0.25
) -> float:
    """A block length (s) for the bootstrap from the residuals' own correlation in time: at
    least `min_block_s`, else twice the integrated autocorrelation time of the residuals'
    means over bins of `bin_s` (the ACF summed up to its first non-positive lag, Geyer's
    initial positive sequence), so that a slow drift of the power (correlated over seconds)
    stays inside the blocks the bootstrap resamples. White residuals: ~bin_s, below the
    minimum. At most a tenth of the run (block_rows keeps ≥ 10 blocks)."""
    t = np.asarray(mid_s, dtype=float)
    r = np.asarray(resid, dtype=float)
    if len(t) < 2 or not t[-1] > t[0]:
        return float(min_block_s)
    k = np.floor((t - t[0]) / bin_s).astype(int)
    n_bins = int(k[-1]) + 1
    count = np.bincount(k, minlength=n_bins)
    mean = np.bincount(k, weights=r, minlength=n_bins) / np.maximum(count, 1)
    x = mean[count > 0]
    x = x - x.mean()
    var = float(np.mean(x * x))
    if len(x) < 20 or var <= 0:
        return float(min_block_s)
    tau = 1.0
    for lag in range(1, len(x) // 10):
        rho = float(np.mean(x[:-lag] * x[lag:])) / var
        if rho <= 0:
            break
        tau += 2.0 * rho
    return float(max(min_block_s, 2.0 * tau * bin_s))


def block_rows(mid_s: np.ndarray, block_s: float) -> int:
    """Rows per block of `block_s` seconds (fewer in a short run: at least _MIN_BLOCKS blocks)."""
    n = len(mid_s)
    span_s = float(mid_s[-1] - mid_s[0]) if n > 1 else 0.0
    block = round(block_s * n / span_s) if span_s > 0 else n
    return int(np.clip(block, 1, max(n // _MIN_BLOCKS, 1)))


def block_bootstrap(
    a: np.ndarray, b: np.ndarray, mid_s: np.ndarray, block_s: float, n_boot: int, seed: int
):
    """Powers refitted on `n_boot` moving-block resamples of the rows: (n_boot, p), block rows."""
    n, p = a.shape
    block = block_rows(mid_s, block_s)
    n_blocks = int(np.ceil(n / block))
    gram_cum = np.zeros((n + 1, p, p))
    gram_cum[1:] = np.cumsum(a[:, :, None] * a[:, None, :], axis=0)
    rhs_cum = np.zeros((n + 1, p))
    rhs_cum[1:] = np.cumsum(a * b[:, None], axis=0)
    rng = np.random.default_rng(seed)
    out = np.empty((n_boot, p))
    for i in range(n_boot):
        s = rng.integers(0, n - block + 1, size=n_blocks)
        gram = gram_cum[s + block].sum(0) - gram_cum[s].sum(0)
        rhs = rhs_cum[s + block].sum(0) - rhs_cum[s].sum(0)
        out[i] = nnls_gram(gram, rhs)
    return out, block
