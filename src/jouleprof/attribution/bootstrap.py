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
