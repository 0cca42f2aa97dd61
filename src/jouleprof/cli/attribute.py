"""`jouleprof attribute RUN_DIR --method ...`: energy per phase, written to phases_<method>.csv
(and phases.csv, which is the regression's)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from jouleprof.cli.console import err_console, fail, note, out_console, working

LAG_FLOOR_MS = 0.8
"""RegressionConfig.buffer_lag_floor_sd_s in ms, for the help text alone (importing the
attribution here would slow every command's start; a test holds the two equal)."""

_METHODS = ("proportional", "regression", "isolation")


def _plain(v: Any) -> Any:
    """numpy scalars and the like as plain Python values for json."""
    return v.item() if hasattr(v, "item") else str(v)


def _finite(v: Any) -> Any:
    """NaN and ±inf as null: strict JSON has no such numbers."""
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_finite(x) for x in v]
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _fmt(v: float | None, spec: str, dash: str = "—") -> str:
    return dash if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _qty(value: float, unit: str) -> str:
    """`value` (seconds or joules) in 4 significant figures at a scale that keeps it short:
    ms or µs for a time, J, mJ or µJ for an energy ("2.724 µs", "0.2185 mJ"), so that a tiny
    phase (an idle sliver between steps) cannot widen the table past 80 columns."""
    # (the least magnitude shown at each scale, its factor, its name), largest first
    scales = (
        ((1e-4, 1e-3, "ms"), (0.0, 1e-6, "µs"))
        if unit == "s"
        else ((1e-2, 1.0, "J"), (1e-5, 1e-3, "mJ"), (0.0, 1e-6, "µJ"))
    )
    if value == 0:
        return f"0 {scales[0][2]}"
    _, factor, name = next(sc for sc in scales if abs(value) >= sc[0])
    return f"{value / factor:,.4g} {name}"


JOINT_NAME_MAX = 18
"""A joint row's name longer than this is shown one member a line ("data+" over
"forward/context"), so that the figures beside it fit 80 columns uncut."""


def _label(name: str) -> str:
    """A phase's name as the table shows it: a long joint name broken after each "+"."""
    return name.replace("+", "+\n") if "+" in name and len(name) > JOINT_NAME_MAX else name


def _table(
    phases: list[Any],
    title: str,
    confidence: float | None,
    truth: dict[str, float | None] | None = None,
) -> Any:
    """Per phase: time and energy per step, the interval's half-width, mean power, share of
    the step; with `truth` (a simulated run), each phase's true simulated energy per step.

    Fits 80 columns: phase names are never cut ("forward/target" and "forward/context" both
    read whole; a long joint row's name takes a line per member), the interval's bounds are
    in phases.csv and --json, and why a phase is unresolved is numbered under the table, each
    reason once.
    """
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from jouleprof.attribution.result import pct_text

    level = f"±{100 * confidence:.0f}%" if confidence else "±"
    t = Table(
        title=title + " · per step", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
    )
    labels = {p.phase: _label(p.phase) for p in phases}
    longest = max((len(ln) for v in labels.values() for ln in v.split("\n")), default=5)
    t.add_column("phase", no_wrap=True, min_width=longest)
    for col in ("time", "energy", level, "power", "share"):
        t.add_column(col, justify="right", no_wrap=True)
    if truth is not None:
        t.add_column("simulated", justify="right", style="magenta", no_wrap=True)
    reasons: list[str] = []
    for p in phases:
        n = max(p.n_steps, 1)
        if p.resolved:
            hw = p.rel_halfwidth
            row = [
                _qty(p.energy_j / n, "J"),
                f"{pct_text(100 * hw)}%" if hw is not None else "—",
                f"{_fmt(p.mean_power_w, '.0f')} W",
                f"{p.share_pct:.1f}%" if p.share_pct is not None else "—",
            ]
        else:
            if p.note not in reasons:
                reasons.append(p.note)
            row = [f"[yellow]? [{reasons.index(p.note) + 1}][/]", "", "", ""]
        if truth is not None:
            tv = truth.get(p.phase)
            row.append(_qty(tv / n, "J") if tv is not None else "—")
        t.add_row(labels[p.phase], _qty(p.time_per_step_s, "s"), *row)
    notes = [Text(f"[{i}] unresolved: {r}", style="yellow") for i, r in enumerate(reasons, 1)]
    if any("+" in p.phase and p.resolved for p in phases):
        notes.append(
            Text("a row a+b weighs its phases together: it overlaps them, so shares add past 100%")
        )
    return Group(t, *notes) if notes else t


def results_from_frame(df) -> list[Any]:
    """PhaseResults from a phases table (phases.csv / phases_<method>.csv); NaN as None."""
    import math as _m

    from jouleprof.attribution.result import PhaseResult

    def val(v: Any) -> Any:
        if v is None or (isinstance(v, float) and _m.isnan(v)):
            return None
        return v.item() if hasattr(v, "item") else v

    out = []
    for r in df.to_dict("records"):
        resolved = bool(val(r.get("resolved")) if r.get("resolved") is not None else True)
        energy = val(r.get("energy_j"))
        out.append(
            PhaseResult(
                phase=str(r["phase"]),
                time_s=float(r["time_s"]),
                time_per_step_s=float(val(r.get("time_per_step_s")) or 0.0),
                energy_j=energy if resolved else None,
                energy_lo_j=val(r.get("energy_lo_j")),
                energy_hi_j=val(r.get("energy_hi_j")),
                mean_power_w=val(r.get("mean_power_w")),
                share_pct=val(r.get("share_pct")),
                method=str(r.get("method", "")),
                resolved=resolved and energy is not None,
                note=str(val(r.get("note")) or ""),
                device=str(val(r.get("device")) or ""),
                n_steps=int(val(r.get("n_steps")) or 0),
            )
        )
    return out


def _say_status(run_dir: Path) -> None:
    """A note where the run did not finish (crashed, killed, interrupted, still running)."""
    from jouleprof.errors import RunDirError
    from jouleprof.store.liveness import effective_status

    try:
        state = effective_status(run_dir)
    except RunDirError:
        return
    if state.status != "complete":
        note(f"this run did not complete (status: {state}): attributing what it recorded")


def _attribute_with_progress(attribute, run_dir, method, device, warmup_steps, opts, w):
    """attribute(...), its stages shown on the progress line where it reports them."""
    import inspect

    if "progress" in inspect.signature(attribute).parameters:

        def show(stage: str) -> None:
            w.update(f"attributing by {method}: {stage}…")

        return attribute(run_dir, method, device, warmup_steps, progress=show, **opts)
    return attribute(run_dir, method, device, warmup_steps, **opts)


class covered_view:
    """`with covered_view(run_dir, device) as (path, notes):` the run as attribution can take it.

    Where the run's tables are whole and its spans lie inside its samples' time range, `path`
    is the run directory itself. Otherwise (a crash) it is a temporary directory holding the
    complete rows of samples.csv, power_buffer.csv and the spans of the steps the samples
    cover, beside links to the other files; `notes` says what was left out.
    """

    def __init__(self, run_dir: Path, device: str | None) -> None:
        self.run_dir = Path(run_dir)
        self.device = device
        self._tmp: Any = None

    def __enter__(self) -> tuple[Path, list[str]]:
        import tempfile

        from jouleprof.errors import RunDirError
        from jouleprof.store.rundir import RunDir, read_csv_tolerant, spans_covered

        rd = RunDir(self.run_dir)
        try:
            samples = rd.read_samples()
            spans = rd.read_spans()
        except RunDirError:
            return self.run_dir, []  # attribution's own checks give the message
        d = samples
        if self.device is not None:
            d = samples[samples["device"] == self.device]
        elif samples["device"].str.startswith("gpu").any():
            d = samples[samples["device"].str.startswith("gpu")]
        spans2, cut = spans_covered(spans, d)
        notes = list(rd.notes) + ([cut] if cut else [])
        buffer = self.run_dir / "power_buffer.csv"
        buf = None
        if buffer.is_file() and buffer.stat().st_size > 0:
            try:
                buf, bnotes = read_csv_tolerant(buffer, ("t_s", "device", "power_w"))
            except RunDirError:
                buf, bnotes = None, []
            notes += bnotes
        if not notes:
            return self.run_dir, []
        self._tmp = tempfile.TemporaryDirectory(prefix="jouleprof-view-")
        view = Path(self._tmp.name)
        rewritten = {"samples.csv": samples, "spans.csv": spans2}
        if buf is not None:
            rewritten["power_buffer.csv"] = buf
        for f in self.run_dir.iterdir():
            if f.is_file() and f.name not in rewritten:
                (view / f.name).symlink_to(f.resolve())
        for name, df in rewritten.items():
            df.to_csv(view / name, index=False)
        return view, notes

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


def _simulated(run_dir: Path) -> dict[str, Any] | None:
    """run.json's record of a simulated GPU, where the run has one."""
    from jouleprof.errors import RunDirError
    from jouleprof.store.rundir import RunDir

    try:
        rec = RunDir(run_dir).read_record()
    except RunDirError:
        return None
    sim = rec.extra.get("simulated_gpu")
    return sim if isinstance(sim, dict) else None


def _simulated_truth(run_dir: Path, sim: dict[str, Any], result) -> dict[str, float | None]:
    """Each phase row's true simulated energy over the steps this attribution analysed."""
    from jouleprof.bench.simulate import true_energies
    from jouleprof.store.rundir import RunDir

    powers = {k: float(w) for k, w in (sim.get("phase_power_w") or {}).items()}
    return true_energies(RunDir(run_dir).read_spans(), powers, result)


def write_method_files(run_dir: Path, result, truth: dict[str, float | None] | None) -> Path:
    """phases_<method>.csv for this method, and phases.csv too when the method is the
    regression (phases.csv is always the regression's). Returns the method's own file."""
    from jouleprof.sensors.simulated import is_simulated_device
    from jouleprof.store.rundir import RunDir

    rd = RunDir(run_dir)
    df = result.to_frame()
    if truth is not None or all(is_simulated_device(d.device) for d in result.devices):
        df["source"] = "simulated"
    if truth is not None:
        df["true_energy_j"] = [truth.get(p) for p in df["phase"]]
    path = rd.write_phases(df, f"phases_{result.method}.csv")
    if result.method == "regression":
        rd.write_phases(df)
    return path


def _refresh_report(run_dir: Path, quiet: bool) -> None:
    """Rebuild the run's report.html where it has one, so that it shows the phases files just
    written rather than the ones it was made from."""
    if not (run_dir / "report.html").is_file():
        return
    from jouleprof.errors import JouleprofError
    from jouleprof.report.html import write_run_report

    try:
        write_run_report(run_dir)
    except (JouleprofError, OSError, ValueError) as e:
        note(f"report.html not updated ({e}): jouleprof report {run_dir} rebuilds it")
        return
    if not quiet:
        note(f"updated {run_dir / 'report.html'} with these phases")


def attribution_failures(extra: dict[str, Any]) -> list[str]:
    """One line per method that failed, as run.json's `extra.attribution` records it
    ("attribution by regression not possible: why"), each reason said once."""
    lines, said = [], set()
    for method, st in (extra.get("attribution") or {}).items():
        if isinstance(st, dict) and not st.get("ok", True):
            r = st.get("reason")
            lines.append(f"attribution by {method} not possible" + ("" if r in said else f": {r}"))
            said.add(r)
    return lines


def print_phases_file(run_dir: Path, name: str = "phases.csv") -> bool:
    """Print a run's phases table as written (one table per device), the simulated truth
    beside it where the run is simulated. False when there is no such file."""
    from jouleprof.store.rundir import RunDir

    rd = RunDir(run_dir)
    if not rd.has(name):
        return False
    df = rd.read_phases(name)
    simulated = "source" in df.columns and (df["source"] == "simulated").any()
    for dev, part in df.groupby(df["device"] if "device" in df.columns else [""] * len(df)):
        phases = results_from_frame(part)
        method = phases[0].method if phases else "?"
        n = phases[0].n_steps if phases else 0
        truth = None
        if simulated and "true_energy_j" in part.columns:
            truth = {
                str(ph): (None if v != v else float(v))
                for ph, v in zip(part["phase"], part["true_energy_j"], strict=True)
            }
        label = " · [bold magenta]SIMULATED GPU[/]" if simulated else ""
        out_console.print(_table(phases, f"{dev} · {method} · {n} steps{label}", None, truth))
    return True


def _sensor_options(path: Path, run_dir: Path, device: str | None) -> dict[str, float]:
    """The regression options of a sensor file, checked against the run's GPU model(s)."""
    from jouleprof.attribution.sensor_file import (
        SENSOR_LAG_SD_S,
        SensorFileError,
        check_run,
        read_sensor,
    )

    try:
        fit = read_sensor(path)
        check_run(fit, run_dir, device)
    except SensorFileError as e:
        fail(str(e))
    how = "a run with varied steps" if fit.varied else "a run whose steps were all alike"
    note(f"buffer lag {1e3 * fit.buffer_lag_s:.2f} ms ±{1e3 * SENSOR_LAG_SD_S:g} from {path} "
         f"({how}: {fit.from_run})")  # fmt: skip
    if not (run_dir / "power_buffer.csv").is_file():
        note(f"{run_dir} recorded no power buffer (power_buffer.csv), so the lag goes unused")
    return fit.options()


def _save_sensor(path: Path, run_dir: Path, result, device: str | None) -> None:
    """Write the lag the attribution fitted (one device) to the sensor file `path`."""
    from jouleprof.attribution.sensor_file import SensorFileError, fit_of_run, write_sensor

    devs = [d for d in result.devices if device is None or d.device == device]
    if len(devs) != 1:
        fail(f"{run_dir} has {len(devs)} GPUs: give --device to say whose lag --save-sensor "
             "writes (the phases files are written)")  # fmt: skip
    dev = devs[0]
    try:
        fit = fit_of_run(dev, run_dir)
        write_sensor(path, fit)
    except SensorFileError as e:
        fail(f"{e} (the phases files are written)")
    note(f"wrote {path}: buffer lag {1e3 * fit.buffer_lag_s:.2f} ms on an {fit.gpu}")
    if not fit.varied:
        note("its steps were all alike, so the lag may hold the loop's misfit: a run measured "
             "with excitation pins it better (docs/excitation.md)")  # fmt: skip


def attribute_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory with samples.csv and spans.csv.")],
    method: Annotated[
        str, typer.Option(help="proportional, regression or isolation.")
    ] = "regression",
    device: Annotated[
        str | None, typer.Option(help="One device, e.g. gpu0 (default: every GPU, and a total).")
    ] = None,
    warmup_steps: Annotated[
        int | None,
        typer.Option(
            help="Leading steps to exclude (default: none where the run recorded its steps "
            "after its warm-up, as `jouleprof profile` does; else until step time is stable)."
        ),
    ] = None,
    confidence: Annotated[
        float, typer.Option(help="Regression: coverage of the confidence interval.")
    ] = 0.95,
    n_boot: Annotated[int, typer.Option(help="Regression: bootstrap resamples (≥ 200).")] = 300,
    instant_window_s: Annotated[
        float, typer.Option(help="Regression: window the instant power field averages, s.")
    ] = 0.025,
    instant_kernel: Annotated[
        str | None,
        typer.Option(
            help="Regression: the instant field's averaging kernel, box:MS, exp:MS (time "
            "constant) or tri:MS (sets the window too; default a boxcar of --instant-window-s)."
        ),
    ] = None,
    stall_model: Annotated[
        bool | None,
        typer.Option(
            "--stall-model/--no-stall-model",
            help="Regression: each phase is fixed work at its own power plus host stalls at "
            "one shared power (for host-paced steps whose phases run longer in some steps). "
            "Default: fit both, keep the stall model where it fits the readings clearly better.",
            show_default=False,
        ),
    ] = None,
    bins: Annotated[
        bool | None,
        typer.Option(
            "--bins/--no-bins",
            help="Regression: cut each phase of ≥ 1.5 × --bin-ms a step into bins of time, each "
            "with its own power (for long phases whose power is not flat, which bias the short "
            "phases beside them). Default: keep the bins where they fit the readings clearly "
            "better.",
            show_default=False,
        ),
    ] = None,
    bin_ms: Annotated[
        float, typer.Option(help="Regression: target length of a bin, ms.", min=0.1)
    ] = 12.5,
    buffer_rows: Annotated[
        bool | None,
        typer.Option(
            "--buffer-rows/--no-buffer-rows",
            help="Regression: use NVML's ~20 ms power-sample buffer (power_buffer.csv, recorded "
            "in fine mode or with --power-buffer) as rows, the kernel's length chosen by the "
            "run's own samples. Default: wherever the run recorded it.",
            show_default=False,
        ),
    ] = None,
    buffer_lag_floor_ms: Annotated[
        float | None,
        typer.Option(
            help="Regression: the least σ of the power buffer's lag that the intervals carry, "
            "ms (the lags fitted on different loops of one card spread by ~0.7 ms; 0: the "
            f"fit's own posterior alone). Default: {LAG_FLOOR_MS:g}.",
            min=0.0,
            show_default=False,
        ),
    ] = None,
    sensor: Annotated[
        Path | None,
        typer.Option(
            help="Regression: take the power buffer's lag from this sensor file (written by "
            "--save-sensor on a run of the same GPU model) as the lag's prior, ±0.5 ms. For "
            "runs whose steps are all alike: they cannot pin the lag themselves.",
            show_default=False,
        ),
    ] = None,
    save_sensor: Annotated[
        Path | None,
        typer.Option(
            help="Regression: write the power buffer's lag this run fitted to a sensor file, "
            "for --sensor on other runs. Best from a run measured with excitation "
            "(its varied steps pin the lag).",
            show_default=False,
        ),
    ] = None,
    gap_tolerance_s: Annotated[
        float, typer.Option(help="Gaps/overlaps between spans up to this long are noise, s.")
    ] = 0.5e-3,
    target_pct: Annotated[
        float,
        typer.Option(
            help="Regression: for each phase whose interval is wider than ±this, say how many "
            "steps would bring it there (0: do not).",
            min=0.0,
        ),
    ] = 5.0,
    joint: Annotated[
        list[str] | None,
        typer.Option(
            help="Regression: also weigh these phases together, as one row beside them, e.g. "
            "--joint gemm+copy (repeatable). For phases that share energy: their sum is "
            "measured where each one's split is not.",
            show_default=False,
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Attribute a run's energy to its phases; write phases_<method>.csv (phases.csv: the
    regression's). Works offline, no GPU needed."""
    from jouleprof.attribution import attribute

    if method not in _METHODS:
        fail(f"unknown --method {method!r}: choose one of {', '.join(_METHODS)}")
    opts: dict[str, Any] = {"gap_tolerance_s": gap_tolerance_s}
    if joint and method != "regression":
        fail(f"--joint weighs phases together in the regression's fit: drop it, or use --method "
             f"regression (--method {method} splits each phase on its own)")  # fmt: skip
    if method == "regression":
        if not 0.5 < confidence < 1:
            fail(f"--confidence is the intervals' coverage, between 0.5 and 1: got {confidence:g}")
        if n_boot < 200:
            fail(f"--n-boot must be at least 200 (bootstrap resamples): got {n_boot}")
        if joint:  # RegressionConfig checks each group (one line naming a bad one)
            opts["joint"] = tuple(joint)
        opts.update(
            confidence=confidence,
            n_boot=n_boot,
            instant_window_s=instant_window_s,
            stall_model=stall_model,
            bins=bins,
            bin_s=bin_ms / 1e3,
            use_buffer=buffer_rows,
        )
        if buffer_lag_floor_ms is not None:
            opts["buffer_lag_floor_sd_s"] = buffer_lag_floor_ms / 1e3
        if instant_kernel is not None:
            from jouleprof.attribution.kernels import parse_kernel

            try:
                window_s, boxes = parse_kernel(instant_kernel)
            except ValueError as e:
                fail(str(e))
            opts.update(instant_window_s=window_s, instant_kernel=boxes)
    if (sensor or save_sensor) and method != "regression":
        fail(f"--sensor and --save-sensor are the regression's buffer lag: drop them, or use "
             f"--method regression (not {method})")  # fmt: skip
    if not run_dir.is_dir():
        fail(f"{run_dir} is not a directory: give a run directory (with samples.csv, spans.csv)")
    if sensor is not None:
        opts.update(_sensor_options(sensor, run_dir, device))
    from jouleprof.sensors.simulated import is_simulated_device

    sim = _simulated(run_dir)
    if sim is None and device is not None and is_simulated_device(device):
        err_console.print(
            f"[bold magenta]{escape(device)} is a simulated GPU: its figures are SIMULATED, not "
            "a measurement[/]",
            highlight=False,
        )
    if sim is not None and device is None:
        device = sim.get("device", "sim0")
        shown = escape(sim.get("note", "SIMULATED GPU"))
        err_console.print(f"[bold magenta]{shown}[/]", highlight=False)
    if sim is not None and method == "regression" and bins is None:
        # The simulated phases draw flat power: bins add nothing but cost (a CPU's long phases).
        opts["bins"] = False
    _say_status(run_dir)
    with covered_view(run_dir, device) as (view, view_notes):
        for n in view_notes:
            note(n)
        with working(f"attributing {run_dir} by {method}…", quiet=json_out) as w:
            result = _attribute_with_progress(
                attribute, view, method, device, warmup_steps, opts, w
            )
        if view_notes:
            for dev in result.devices:
                dev.notes[:0] = view_notes
    truth = _simulated_truth(run_dir, sim, result) if sim is not None else None
    path = write_method_files(run_dir, result, truth)
    if save_sensor is not None:
        _save_sensor(save_sensor, run_dir, result, device)
    if json_out:
        doc = result.to_json()
        doc["phases_csv"] = str(path)
        simulated = sim is not None or all(is_simulated_device(d.device) for d in result.devices)
        doc["source"] = "simulated" if simulated else "measured"
        if method == "regression" and target_pct > 0:
            from dataclasses import asdict

            from jouleprof.attribution.precision import plan

            doc["steps_needed"] = {
                "target_pct": target_pct,
                "phases": [
                    {"device": d.device, **asdict(n)}
                    for d in result.devices
                    for n in plan(d, target_pct / 100)
                ],
            }
        print(json.dumps(_finite(doc), indent=2, default=_plain))
        _refresh_report(run_dir, quiet=True)
        return
    for dev in result.devices:
        e = dev.step_energy_j
        per_step = f"{e / dev.n_steps:,.4g} J/step" if e else "energy unavailable"
        title = (
            f"{dev.device} · {dev.method} · {dev.n_steps} steps "
            f"({dev.warmup_steps} warm-up excluded) · step {1e3 * dev.step_time_s:,.1f} ms, "
            f"{per_step}"
        )
        if sim is not None or is_simulated_device(dev.device):
            title += " · [bold magenta]SIMULATED GPU[/]"
        out_console.print(_table(dev.phases, title, dev.diagnostics.get("confidence"), truth))
        for n in dev.notes:
            note(f"{dev.device}: {n}")
        if dev.method == "regression":
            d = dev.diagnostics
            note(
                f"{dev.device}: fit on {d['n_rows']} sensor intervals, residual RMS "
                f"{d['residual_rms_w']:.1f} W; intervals {100 * d['confidence']:.0f}%, "
                f"{d['n_boot']} block-bootstrap resamples"
            )
            if target_pct > 0:
                from jouleprof.attribution.precision import plan, plan_text

                for need in plan(dev, target_pct / 100):
                    note(f"{dev.device}: {plan_text(need, target_pct / 100, dev.step_time_s)}")
    if len(result.devices) > 1:
        title = f"total over {len(result.devices)} devices"
        out_console.print(
            _table(result.total, title, confidence if method == "regression" else None)
        )
    also = " and phases.csv" if method == "regression" else ""
    note(f"wrote {path}{also}")
    _refresh_report(run_dir, quiet=False)


def register(app: typer.Typer) -> None:
    app.command("attribute")(attribute_cmd)
