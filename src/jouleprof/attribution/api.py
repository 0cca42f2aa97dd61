"""`attribute(run_dir, method)`: a run's energy per phase and device; phases.csv.

Reads samples.csv and spans.csv (and isolation.csv for the isolation method; for regression,
power_buffer.csv where the run recorded NVML's power buffer, and run.json's record of repeated
phases) and nothing else, so it runs offline on a copied run directory.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from jouleprof.attribution.common import GAP_TOLERANCE_S, build_timeline, check_spans
from jouleprof.attribution.isolation import attribute_isolation, load_replays
from jouleprof.attribution.proportional import attribute_proportional, measured_steps_energy
from jouleprof.attribution.regression import RegressionConfig, attribute_regression
from jouleprof.attribution.result import AttributionResult, DeviceAttribution
from jouleprof.attribution.stages import reporting, stage
from jouleprof.attribution.steps_needed import annotate
from jouleprof.errors import AttributionError, RunDirError
from jouleprof.sensors.nvml_buffer import POWER_BUFFER_CSV
from jouleprof.store.rundir import SPANS_CSV, RunDir

log = logging.getLogger(__name__)

METHODS: tuple[str, ...] = ("proportional", "regression", "isolation")
ENERGY_SIGNALS: tuple[str, ...] = ("energy_j", "power_instant_w", "power_w")


def _split_options(method: str, opts: dict[str, Any]) -> tuple[float, RegressionConfig | None]:
    gap = float(opts.pop("gap_tolerance_s", GAP_TOLERANCE_S))
    if method == "regression":
        valid = {f.name for f in fields(RegressionConfig)}
        unknown = sorted(set(opts) - valid)
        if unknown:
            valid_all = sorted(valid | {"gap_tolerance_s"})
            raise AttributionError(f"unknown regression option(s) {unknown}; valid: {valid_all}")
        try:
            return gap, RegressionConfig(**opts)
        except ValueError as e:
            raise AttributionError(str(e)) from e
    if opts:
        raise AttributionError(
            f"--method {method} takes no option(s) {sorted(opts)} (only gap_tolerance_s)"
        )
    return gap, None


def _read_spans(rd: RunDir):
    p = rd.path / SPANS_CSV
    if not p.is_file() or p.stat().st_size == 0:
        raise AttributionError(
            f"{rd.path} has no phase spans ({SPANS_CSV} is missing or empty): record the run with "
            "the phase recorder (`with prof.step(): with prof.phase(...)`) to attribute it"
        )
    return rd.read_spans()


def _read_buffer(rd: RunDir, cfg: RegressionConfig | None):
    """power_buffer.csv as a DataFrame where regression may use it (cfg.use_buffer not False
    and the file holds samples); else None."""
    if cfg is None or cfg.use_buffer is False:
        return None
    p = rd.path / POWER_BUFFER_CSV
    if not p.is_file() or p.stat().st_size == 0:
        return None
    import pandas as pd

    try:
        df = pd.read_csv(p)
    except (ValueError, OSError) as e:
        raise RunDirError(f"{p} is not readable: {e}") from e
    missing = [c for c in ("t_s", "device", "power_w") if c not in df.columns]
    if missing:
        raise RunDirError(f"{p} lacks the columns {missing}")
    df["device"] = df["device"].astype(str)
    return df.sort_values("t_s", kind="stable").reset_index(drop=True)


def _record_extra(rd: RunDir, warn: bool = True) -> dict[str, Any]:
    """run.json's `extra` (empty where run.json is missing or unreadable: attribution needs only
    the spans and samples; `warn`: log that a recorded phase repetition is then not seen)."""
    try:
        return dict(rd.read_record().extra or {})
    except (RunDirError, OSError, ValueError) as e:
        if warn:
            log.warning("run.json not read (%s): a recorded phase repetition is not seen", e)
        return {}


def recorded_after_warmup(extra: dict[str, Any]) -> bool:
    """Whether a run recorded its steps only after its warm-up had settled (run.json's
    `extra.measured_segment` with a first recorded step: `jouleprof profile` and study cells),
    so that none of its recorded steps is warm-up."""
    seg = extra.get("measured_segment")
    return isinstance(seg, dict) and seg.get("first_recorded_step") is not None


def _regression(samples, tl, dev: str, cfg, buffer, spans, extra, timeline_of) -> DeviceAttribution:
    """The regression on one device, under the repeat rule and its checks
    (`repeat_rule.fit_with_rule`); `timeline_of(spans)` builds the timeline of other spans."""
    from jouleprof.attribution.repeat_rule import fit_with_rule

    def fit(c, b):
        return attribute_regression(samples, tl, dev, c, b)

    def fit_relabelled(other, c, b):
        with stage(f"{dev}: replay check"):
            return attribute_regression(samples, timeline_of(other), dev, c, b)

    return fit_with_rule(fit, fit_relabelled, cfg, buffer, extra, spans, tl.analysed_steps)


def _note_costs(res: DeviceAttribution, spans, extra: dict[str, Any]) -> None:
    """What the run's opt-in variations of the step cost (excitation gaps, phase repetition),
    excited steps against plain ones (`attribution.excitation.overhead`): in the diagnostics
    (`excitation_cost`, `repeat_cost`) and as a note."""
    from jouleprof.attribution.excitation import cost_note, overhead
    from jouleprof.attribution.repeat_rule import repeated_steps, replayed_phases
    from jouleprof.timeline.excite import GAP_PHASE

    costs = []
    if (spans["phase"].astype(str) == GAP_PHASE).any():
        costs.append(("excitation_cost", "excitation", overhead(spans, res)))
    replayed = replayed_phases(extra)
    if replayed:
        drawn = set(repeated_steps(spans, replayed, spans["step"].unique()))
        costs.append(
            ("repeat_cost", f"repeating {', '.join(replayed)}", overhead(spans, res, drawn))
        )
    for key, what, cost in costs:
        res.diagnostics[key] = cost
        if line := cost_note(cost, what):
            cost["line"] = line
            res.notes.append(line)


def _devices(samples, device: str | None) -> list[str]:
    have = sorted(samples["device"].astype(str).unique())
    if not have:
        raise AttributionError(
            "samples.csv holds no sensor readings: no energy was measured in this run (run.json's "
            "notes say why, e.g. no NVIDIA driver), so there is nothing to attribute (where no GPU "
            "was measured, jouleprof profile and jouleprof.profile drive a simulated GPU only "
            "once the run completes)"
        )
    if device is not None:
        if device not in have:
            raise AttributionError(f"no device {device!r} in samples.csv; devices: {have}")
        return [device]
    gpus = [d for d in have if d.startswith("gpu")]
    if not gpus:
        raise AttributionError(
            f"samples.csv has no GPU device (devices: {have}); pass --device to choose one, "
            f"e.g. --device {have[0]}"
        )
    return gpus


def _check_signals(samples, device: str) -> None:
    d = samples[samples["device"] == device]
    if not any(c in d.columns and d[c].notna().any() for c in ENERGY_SIGNALS):
        raise AttributionError(
            f"samples.csv holds no energy counter or power readings for {device} "
            f"({', '.join(ENERGY_SIGNALS)} are all empty): there is no energy to attribute"
        )


def attribute(
    run_dir: str | os.PathLike[str],
    method: str,
    device: str | None = None,
    warmup_steps: int | None = None,
    progress: Callable[[str], None] | None = None,
    **opts: Any,
) -> AttributionResult:
    """Attribute a run's energy to its phases, per device (default: every GPU in samples.csv).

    Args:
        run_dir: the run directory (samples.csv, spans.csv; for isolation, isolation.csv or
            the runner's isolation_windows.csv).
        method: "proportional", "regression" or "isolation".
        device: one device to attribute (e.g. "gpu0"); None: all GPUs, summed in `total`.
        warmup_steps: leading steps to exclude; None: none where the run recorded its steps
            after its warm-up (`recorded_after_warmup`: `jouleprof profile`, study cells),
            else the rule of `common.auto_warmup_steps`.
        progress: called with a short description of each stage as it begins ("reading the
            run", "gpu0: refresh grids", "fit: stall model, point", ...); None: silent.
        **opts: `gap_tolerance_s`, and for regression any `RegressionConfig` field (with
            `use_buffer` True or None, the run's power_buffer.csv is used: required / where
            present; off by default, see `RegressionConfig.use_buffer`).

    Raises:
        AttributionError: the data cannot support the attribution (the message says why).
        RunDirError: the run directory is missing or malformed.
    """
    if method not in METHODS:
        raise AttributionError(f"unknown method {method!r}: choose one of {', '.join(METHODS)}")
    gap_s, cfg = _split_options(method, dict(opts))
    with reporting(progress):
        return _attribute(run_dir, method, device, warmup_steps, gap_s, cfg)


def _attribute(run_dir, method: str, device, warmup_steps, gap_s: float, cfg) -> AttributionResult:
    rd = RunDir(run_dir)
    if not rd.path.is_dir():
        raise RunDirError(f"{rd.path} is not a directory: give a run directory")
    with stage("reading the run"):
        spans = _read_spans(rd)
        samples = rd.read_samples()
        buffer = _read_buffer(rd, cfg) if method == "regression" else None
        # the repeat rule's and the replay check's input (the check runs with or without buffer)
        regression = method == "regression"
        extra = _record_extra(rd, warn=regression) if regression or warmup_steps is None else {}
    if warmup_steps is None and recorded_after_warmup(extra):
        warmup_steps = 0
    devices = _devices(samples, device)
    out: list[DeviceAttribution] = []
    for dev in devices:
        _check_signals(samples, dev)
        check_spans(spans, samples, dev, gap_s)
        t = samples.loc[samples["device"] == dev, "t_s"]
        with stage(f"{dev}: timeline"):
            tl = build_timeline(spans, float(t.min()), float(t.max()), warmup_steps, gap_s)
        if method == "proportional":
            out.append(attribute_proportional(samples, tl, dev))
        elif method == "regression":
            if cfg is not None and cfg.joint:
                from jouleprof.attribution.groups import check_members, parse_groups

                check_members(parse_groups(cfg.joint), tl.order)

            def timeline_of(other, t=t, n_warm=len(tl.warmup_steps)):
                return build_timeline(other, float(t.min()), float(t.max()), n_warm, gap_s)

            out.append(_regression(samples, tl, dev, cfg, buffer, spans, extra, timeline_of))
            _note_costs(out[-1], spans, extra)
            # An unresolved phase says how many steps would resolve it.
            annotate(out[-1], min_rows=cfg.min_rows if cfg is not None else 20)
        else:
            replays = load_replays(rd.path, samples, dev)
            measured = measured_steps_energy(samples, tl, dev)
            # Shares are of the steps' energy: idle gaps between steps are taken out by time.
            step_e = measured.energy_j * tl.step_time_s / measured.time_s
            res = attribute_isolation(replays, tl, dev, step_e)
            res.diagnostics["step_energy_signal"] = measured.signal
            out.append(res)
        log.info("attributed %s by %s over %d steps", dev, method, tl.n_steps)
    return AttributionResult(method, out)


def write_phases(run_dir: str | os.PathLike[str], result: AttributionResult) -> Path:
    """Write `result` to the run directory's phases.csv (atomically); returns its path."""
    return RunDir(run_dir).write_phases(result.to_frame())
