"""Bins tried and not kept still widen every phase by how far they move it, including a phase
the binned fit could not resolve (its unreported estimate is its point)."""

from __future__ import annotations

from dataclasses import replace

from jouleprof.attribution.regression_choice import _auto_bins
from jouleprof.attribution.regression_config import RegressionConfig
from jouleprof.attribution.result import DeviceAttribution, PhaseResult, unresolved


def _phase(name: str, e: float, hw: float) -> PhaseResult:
    return PhaseResult(name, 6.0, 0.006, e, e - hw, e + hw, e / 6.0, None, "regression", True,
                       note="1000 sensor intervals; ±x%", n_steps=1000)  # fmt: skip


def _fit(phases, rms: float, bins: bool) -> DeviceAttribution:
    diag = {"n_rows": 10_000, "fitted_power_w": [1.0] * 4, "residual_rms_w": rms,
            "rows_per_label": {"gemm#0": 500, "gemm#1": 500}}  # fmt: skip
    if bins:
        diag["bins"] = {"members": {"gemm": ["gemm#0", "gemm#1"]}}
    return DeviceAttribution("gpu0", "regression", phases, 1000, 0, 0.05, 30_000.0,
                             diagnostics=diag)  # fmt: skip


def test_a_phase_unresolved_with_bins_is_widened_by_its_estimates_move():
    # Without bins: the spin resolved at 2,000 ± 700 J. With bins (not kept: the residual is
    # about the same) the spin is unresolved, its unreported estimate 600 J: a 1,400 J move.
    whole = _fit([_phase("gemm", 25_000.0, 800.0), _phase("spin", 2_000.0, 700.0)], 88.5, False)
    spin_b = replace(unresolved("spin", 6.0, 1000, "regression", "too wide"), estimate_j=600.0)
    binned = _fit([_phase("gemm", 24_800.0, 900.0), spin_b], 87.7, True)
    got = _auto_bins(lambda cfg: binned, RegressionConfig(), whole)
    assert got is whole  # bins not kept
    assert got.diagnostics["bins_choice"]["moved_j"] == {"gemm": 200.0, "spin": 1_400.0}
    # Applied as the regression applies it after the choice:
    from jouleprof.attribution.regression_choice import _widen_by_unkept_bins

    _widen_by_unkept_bins(got, got.diagnostics["bins_choice"]["moved_j"], 0.0125)
    spin = got.phase("spin")
    assert not spin.resolved and "wider than the estimate" in spin.note
    assert got.phase("gemm").resolved
