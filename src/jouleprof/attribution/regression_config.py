"""The regression's settings: `RegressionConfig` (what it reads and how sure it must be), the
measured constants its defaults come from (the power buffer's kernel, window and lag; the counter
kernel's shift prior), and `check_kernel`, which validates a kernel given as boxes.

The fit that uses them is `attribution.regression`, which re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jouleprof.attribution.kernels import BOXCAR, Boxes, exponential

BUFFER_KERNEL: Boxes = exponential()
"""The shape NVML's power buffer weighs the power before its stamp with, as measured on an
H200 (driver 580.159.04) by benchmarks/buffer_window.py on the kernel probe
benchmarks/results/kernel_probe/f33ed69 (matmul bursts with recorded edges): an exponential
of time constant 12 ms (window 5 τ) fitted best, 1031 samples, residual 56.6 W against
65.8 W for the best boxcar (24 ms at a 3 ms lag); every shape put the weight's centroid
15–17 ms before the stamp."""
BUFFER_WINDOW_S = 0.060
"""The window BUFFER_KERNEL spans (5 × its time constant), same source."""
BUFFER_LAG_S = 0.005
"""How long before its stamp a buffer sample's window ends, same source (its ridge: a
shorter lag goes with a longer window; ±1 ms moves the residual by < 2 %)."""
BUFFER_LAG_FLOOR_SD_S = 0.0008
"""The least σ of that lag the intervals carry: the SD of the lags fitted on different loops
of one card (0.7 ms over 17 runs of 10 loops on an H200 and an H100,
benchmarks/results/ref_loops/README.md, "The buffer's lag carried in the intervals")."""


COUNTER_KERNEL_SHIFT_SD_S = 0.0005
"""With a counter kernel, the prior σ of the counter grid's shift and drift (unless
RegressionConfig.counter_shift_sd_s says otherwise): the kernel's mean delay was measured
to about ±0.6 ms on the H200 probes (benchmarks/counter_tail.py), and the reads place the
counter's grid on the V-JEPA2 runs to within a few tenths of a millisecond."""


@dataclass(frozen=True)
class RegressionConfig:
    """How the regression reads the sensor and how sure it must be."""

    instant_window_s: float = 0.025
    """The instant power field is the mean power over this long before its refresh (the prior
    of the fit when fit_instant_window)."""
    use_counter: bool = True
    """Use the cumulative energy counter's intervals."""
    use_instant: bool = True
    """Use the instant power readings."""
    use_average: bool = False
    """Use the default (1 s running average) power readings; coarse, off by default."""
    average_window_s: float = 1.0
    """The window the default power reading averages."""
    counter_weight: float = 1.0
    """Weight of a counter row."""
    instant_weight: float = 0.5
    """Weight of an instant-power row, relative to a counter row (lower: the window is assumed)."""
    average_weight: float = 0.1
    """Weight of a 1 s average row."""
    reweight: bool = True
    """Also weigh each row by its modelled variance (jitter at its edges, signal noise)."""
    refine_grid: bool = True
    """Refine the refresh grid's position and drift from the power data."""
    fit_instant_window: bool = True
    """Also refine the instant field's window from the data (instant_window_s is its prior)."""
    instant_kernel: Boxes = BOXCAR
    """How the instant field weighs the power before its refresh, as boxes (start, end,
    weight): each box spans from start × window to end × window before the refresh, weights
    summing to 1. The default is a plain boxcar over the window; an exponential or triangular
    filter is a few boxes (benchmarks/instant_kernel.py compares them on a run)."""
    n_boot: int = 300
    """Bootstrap resamples for the confidence interval (≥ 200)."""
    block_s: float = 1.5
    """Length of the bootstrap's blocks of consecutive rows, in seconds (the least, where
    block_from_residuals)."""
    block_from_residuals: bool = True
    """Lengthen the bootstrap's blocks to the residuals' own correlation time
    (`bootstrap.residual_block_s`): a power that drifts slowly through the run (±1 % over
    seconds) leaves residuals correlated far beyond block_s, and blocks shorter than that
    make the interval too narrow (benchmarks/interval_coverage.py)."""
    confidence: float = 0.95
    """Coverage of the reported interval."""
    min_rows: int = 20
    """A phase overlapped by fewer sensor intervals than this is unresolved."""
    margin_s: float = 1.0
    """Rows up to this far outside the analysed steps still inform the idle power."""
    seed: int = 0
    """Seeds the bootstrap."""
    min_rel_halfwidth: float = 0.001
    """No interval is reported narrower than ± this fraction of its estimate: below ±0.1 % the
    assumptions (power stationary across steps, the sensor model) matter more than the data."""
    stall_model: bool | None = None
    """Model each phase as fixed work plus host stalls at one shared power (`attribution.stall`):
    for host-paced steps, whose phases run longer in some steps at little extra power. None:
    fit both models and keep the stall model where it lowers the residual RMS below
    STALL_KEEP_RATIO of the plain model's."""
    stall_quantile: float = 0.05
    """Stall model: a phase's work time in a step is this quantile of its per-step time."""
    power_piece_s: float | None = 60.0
    """Over a run of at least two such pieces, fit the power fields' refresh grid piece by
    piece where one grid for the run jitters by more than 3 ms and the pieces halve that
    (`grid.power_pieces`: their period moves with the load). None: one grid."""
    bins: bool | None = None
    """Cut each phase of at least 1.5 × bin_s per step into bins of time, each with its own
    power (`attribution.bins`): for long phases whose power is not flat, which otherwise
    bias the short phases beside them. None: fit with and without, and keep the bins where
    they lower the residual RMS below BIN_KEEP_RATIO of the unbinned model's."""
    bin_resolution_check: bool = True
    """Where bins are used, fit again with bins twice as long and widen each phase's interval
    by how much that moves it (`regression_choice`): the bootstrap cannot see a bin whose
    power is not flat either."""
    widen_by_unkept_bins: bool = True
    """Where bins were tried and not kept (bins=None), widen each phase's interval by how far
    the binned fit moved it (`regression_choice`): the bootstrap cannot see a long phase whose
    power is not flat, and a binned fit not clearly better still measures what it does to the
    short phases beside it."""
    bounded_splits: bool = True
    """An unresolved phase whose joint row with a short neighbour is resolved is reported as
    the joint energy less the neighbour's, its interval widened by the whole range the
    neighbour's energy can take between the lowest and highest power the sensors read
    (`regression_results._bounded_splits`)."""
    bin_s: float = 0.0125
    """Target length of a bin: a phase gets round(time per step / bin_s) bins (≥ 2 to be cut).
    On a simulated backward whose power steps from 380 to 680 W halfway, 25 ms bins (one
    straddling the step) left the 6 ms optimizer after it 12–19 % low and 20 ms bins 17–21 %
    high, truth outside the interval; 12.5 ms bins put it within −4…+1 % on two seeds of three
    (tests/unit/test_attribution_bins.py). On the H200's run6 10–25 ms bins moved the optimizer
    between −5 % and +5 % of its isolated energy, inside its ±15 % interval."""
    use_buffer: bool | None = None
    """Use NVML's power-sample buffer (power_buffer.csv: a sample every ~20 ms) as rows, each
    the power weighed by `buffer_kernel` over a short window before its stamp. None (default):
    wherever the run recorded it; True: required; False: never. On six 240 s H200 V-JEPA2
    runs (benchmarks/results/attr_vith_b8, run6–run11) with long phases in bins, these rows
    brought the 6 ms optimizer from ±10–23 % to ±4–9 % of its isolated energy. Before bins
    (run5) they mis-split it (+34 %), and the split moves with the kernel's length, which the
    run's own rows therefore choose (`buffer_window_scales`)."""
    buffer_weight: float = 0.5
    """Weight of a buffer row, relative to a counter row (as an instant row's: its window is
    measured on another load, and its rows are many: ~5 per 100 ms refresh)."""
    buffer_kernel: Boxes = BUFFER_KERNEL
    """How a buffer sample weighs the power before its stamp, as boxes (start, end, weight) in
    units of buffer_window_s (as instant_kernel)."""
    buffer_window_s: float = BUFFER_WINDOW_S
    """The span of buffer_kernel."""
    buffer_lag_s: float = BUFFER_LAG_S
    """A buffer sample's window ends this long before its stamp."""
    buffer_lag_sd_s: float = 0.002
    """Prior uncertainty (σ) of buffer_lag_s; the fit refines the lag within it (0: fixed)."""
    buffer_lag_floor_sd_s: float = BUFFER_LAG_FLOOR_SD_S
    """Least σ of the buffer's lag that the intervals carry (0: the fit's posterior alone). The
    lag a run fits absorbs some of its loop's misfit: its posterior σ is 0.1–0.2 ms, while the
    lags fitted on different loops of one card spread with an SD of 0.7 ms (17 runs of 10
    loops on an H200 and an H100; 0.6 and 1.0 ms between loops)."""
    lag_profile: bool = True
    """Repeat the fit at fixed buffer lags across the prior's ±2σ, at the chosen buffer window
    and at each of buffer_window_scales × the default window, and widen each interval to reach
    the farthest lag on each side that the run cannot rule out (a paired test over the
    bootstrap's blocks; `attribution.lag_profile`). The fit's lag is a local minimum: where
    every step is alike a second one can fit as well and split neighbours quite differently."""
    buffer_jitter_s: float = 0.0003
    """σ of where a buffer sample's window really falls around its placed one (the driver
    stamps each sample; a blur wider than the truth biases a short phase between two others:
    1 ms took 9 % off a simulated 4 ms phase)."""
    buffer_window_rel_sd: float = 0.25
    """Relative uncertainty of buffer_window_s, carried into every interval as a systematic
    spread (on the kernel probe, exponentials of 40–75 ms fitted within a few percent)."""
    buffer_window_scales: tuple[float, ...] = (2 / 3, 5 / 6, 1.0, 1.25)
    """Where buffer rows are used, the fit is repeated with buffer_window_s (and so the
    kernel's time constant) times each of these, and the scale whose buffer rows fit best is
    kept; each phase's interval is then widened by how far the neighbouring scales move it
    (`regression_choice`). On the kernel probe exponentials of τ 8–12 ms fitted alike, and on
    the H200 V-JEPA2 runs the 6 ms optimizer moved ~2.5 points a millisecond of τ on one run and
    under 1 on another (benchmarks/results/attr_vith_b8, session 7). Empty: the kernel as set."""
    floor_at_idle: bool = False
    """Fit no phase (nor the untracked time, the stall power or a bin) below the idle power:
    each is the idle column's power plus a non-negative excess (`placement.floor_map`), on
    the assumption that a GPU doing anything draws at least what it draws idle between steps.
    Only where the analysed steps have idle time between them (an idle column). Off by
    default: on the H200 reference loops it lifted the powers fitted below idle (user4's spin
    70 → 119 W, pl_resnet50's stall 99 → 128 W) but moved no verdict, and it moved the V-JEPA2
    optimizer 0.6–0.9 points further from its replay (benchmarks/results/ref_loops, "Tried")."""
    joint: tuple[str, ...] = ()
    """Groups of phases to weigh together, each "a+b" (or "a+b+c"): a row per group beside the
    phases, its energy and interval from the same fit (`attribution.groups`). For phases that
    share energy, whose sum is defined where each one's split is not."""
    intervals: bool = True
    """False: point estimates only, without the bootstrap or the sensor model's spread (each
    interval at its floor). For the fits that only choose a setting."""

    counter_tail_s: float = 0.0
    """Time constant of an exponential tail by which the energy the counter books trails the
    power drawn (0: no tail, the counter books each interval's own energy). With a tail, a
    counter row over [t0, t1] holds the energy drawn before it weighed by the counter's
    response (`kernels.counter_delays`): energy a phase draws just before a short phase is
    booked partly during it, and the regression gives it back to the phase that drew it,
    as a replay loop's energy per call does. Off by default: on the H200 the response
    measured on the kernel probe (τ 12 ms holding 40 %, lag 0.5 ms) moved the V-JEPA2
    optimizer and optimizer+EMA further above their isolated energy in every run, plain and
    stall models alike (benchmarks/results/attr_vith_b8, "Counter tail";
    benchmarks/counter_tail.py measures the response)."""
    counter_tail_fraction: float = 1.0
    """The share of the energy that trails by counter_tail_s; the rest is booked at once
    (after counter_lag_s)."""
    counter_lag_s: float = 0.0
    """The counter books the energy drawn this long before (a pure delay; the tail follows
    it). 0 with counter_tail_s 0: no kernel at all."""
    counter_tail_rel_sd: float = 0.25
    """Relative uncertainty of counter_tail_s, carried into every interval as a systematic
    spread where a tail is set."""
    counter_shift_sd_s: float | None = None
    """Prior σ of the counter grid's shift and drift where the fit refines them. None: the grid
    fit's own standard error, capped at COUNTER_KERNEL_SHIFT_SD_S where a counter kernel is
    set (the kernel's lag is measured against the grid where the counter's reads put it, and
    the shift would trade with it)."""

    def __post_init__(self) -> None:
        for name in (
            "instant_window_s",
            "average_window_s",
            "block_s",
            "buffer_window_s",
            "bin_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        for name in (
            "counter_weight",
            "instant_weight",
            "average_weight",
            "buffer_weight",
            "margin_s",
            "min_rel_halfwidth",
            "buffer_lag_sd_s",
            "buffer_lag_floor_sd_s",
            "buffer_jitter_s",
            "counter_tail_s",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be ≥ 0, got {getattr(self, name)}")
        from jouleprof.attribution.groups import SEP, parse_groups

        object.__setattr__(self, "joint", tuple(SEP.join(g) for g in parse_groups(self.joint)))
        check_kernel(self.instant_kernel)
        check_kernel(self.buffer_kernel, "buffer_kernel")
        if self.n_boot < 200:
            raise ValueError(f"n_boot must be ≥ 200, got {self.n_boot}")
        if not 0.5 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0.5, 1), got {self.confidence}")
        if self.min_rows < 1:
            raise ValueError(f"min_rows must be ≥ 1, got {self.min_rows}")
        if not (self.use_counter or self.use_instant or self.use_average):
            raise ValueError("use_counter, use_instant and use_average cannot all be False")
        if any(not sc > 0 for sc in self.buffer_window_scales):
            raise ValueError(
                f"buffer_window_scales must all be > 0, got {self.buffer_window_scales}"
            )
        if not 0 <= self.buffer_window_rel_sd < 1:
            raise ValueError(
                f"buffer_window_rel_sd must be in [0, 1), got {self.buffer_window_rel_sd}"
            )
        if not 0 <= self.counter_tail_fraction <= 1:
            raise ValueError(
                f"counter_tail_fraction must be in [0, 1], got {self.counter_tail_fraction}"
            )
        if not 0 <= self.counter_tail_rel_sd < 1:
            raise ValueError(
                f"counter_tail_rel_sd must be in [0, 1), got {self.counter_tail_rel_sd}"
            )
        if self.counter_shift_sd_s is not None and not self.counter_shift_sd_s >= 0:
            raise ValueError(f"counter_shift_sd_s must be ≥ 0, got {self.counter_shift_sd_s}")
        if not np.isfinite(self.counter_lag_s):
            raise ValueError(f"counter_lag_s must be finite, got {self.counter_lag_s}")
        if self.power_piece_s is not None and not self.power_piece_s > 0:
            raise ValueError(f"power_piece_s must be > 0 seconds or None, got {self.power_piece_s}")
        if not 0 <= self.stall_quantile < 0.5:
            raise ValueError(f"stall_quantile must be in [0, 0.5), got {self.stall_quantile}")


def check_kernel(kernel, name: str = "instant_kernel") -> None:
    """ValueError unless `kernel` is boxes (start, end, weight), start > end ≥ 0, weights ≥ 0
    summing to 1."""
    boxes = [tuple(b) for b in kernel]
    ok = (
        bool(boxes)
        and all(len(b) == 3 and b[0] > b[1] >= 0 and b[2] >= 0 for b in boxes)
        and abs(sum(b[2] for b in boxes) - 1.0) < 1e-6
    )
    if not ok:
        raise ValueError(
            f"{name} must be boxes (start, end, weight) with start > end ≥ 0 (in "
            f"windows before the refresh) and weights summing to 1, got {kernel!r}"
        )


__all__ = [
    "BUFFER_KERNEL",
    "BUFFER_LAG_S",
    "BUFFER_WINDOW_S",
    "COUNTER_KERNEL_SHIFT_SD_S",
    "RegressionConfig",
    "check_kernel",
]
