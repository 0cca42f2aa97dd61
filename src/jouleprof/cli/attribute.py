"""`jouleprof attribute RUN_DIR --method ...`: energy per phase, written to phases.csv."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer

from jouleprof.cli.console import err_console, fail, note, out_console

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


def _table(phases: list[Any], title: str, confidence: float | None) -> Any:
    """Per phase: time and energy per step, the interval, mean power, share of the step."""
    from rich.table import Table

    from jouleprof.attribution.result import pct_text

    level = f"{100 * confidence:.0f}% interval" if confidence else "interval"
    t = Table(title=title, title_justify="left")
    t.add_column("phase")
    for col in ("time/step", "energy/step", level + "/step", "power", "share"):
        t.add_column(col, justify="right")
    any_unresolved = any(not p.resolved for p in phases)
    if any_unresolved:
        t.add_column("note")
    for p in phases:
        n = max(p.n_steps, 1)
        if p.resolved:
            hw = p.rel_halfwidth
            interval = "—"
            if p.energy_lo_j is not None and p.energy_hi_j is not None:
                interval = f"{p.energy_lo_j / n:,.4g} … {p.energy_hi_j / n:,.4g} J"
                interval += f" (±{pct_text(100 * hw)}%)" if hw is not None else ""
            row = [
                f"{p.energy_j / n:,.4g} J",
                interval,
                f"{_fmt(p.mean_power_w, ',.1f')} W",
                f"{p.share_pct:.1f}%" if p.share_pct is not None else "—",
            ]
            row += [""] if any_unresolved else []
        else:
            row = ["[yellow]unresolved[/]", "", "", "", f"[yellow]{p.note}[/]"]
        t.add_row(p.phase, f"{1e3 * p.time_per_step_s:,.2f} ms", *row)
    return t


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
        typer.Option(help="Leading steps to exclude (default: until step time is stable, ≥ 1)."),
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
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Attribute a run's energy to its phases and write phases.csv (works offline, no GPU)."""
    from jouleprof.attribution import attribute, write_phases

    if method not in _METHODS:
        fail(f"unknown --method {method!r}: choose one of {', '.join(_METHODS)}")
    opts: dict[str, Any] = {"gap_tolerance_s": gap_tolerance_s}
    if method == "regression":
        opts.update(
            confidence=confidence,
            n_boot=n_boot,
            instant_window_s=instant_window_s,
            stall_model=stall_model,
            bins=bins,
            bin_s=bin_ms / 1e3,
            use_buffer=buffer_rows,
        )
        if instant_kernel is not None:
            from jouleprof.attribution.kernels import parse_kernel

            try:
                window_s, boxes = parse_kernel(instant_kernel)
            except ValueError as e:
                fail(str(e))
            opts.update(instant_window_s=window_s, instant_kernel=boxes)
    if json_out:
        result = attribute(run_dir, method, device, warmup_steps, **opts)
    else:
        with err_console.status(f"attributing {run_dir} by {method}…"):
            result = attribute(run_dir, method, device, warmup_steps, **opts)
    path = write_phases(run_dir, result)
    if json_out:
        doc = result.to_json()
        doc["phases_csv"] = str(path)
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
        return
    for dev in result.devices:
        e = dev.step_energy_j
        per_step = f"{e / dev.n_steps:,.4g} J/step" if e else "energy unavailable"
        title = (
            f"{dev.device} · {dev.method} · {dev.n_steps} steps "
            f"({dev.warmup_steps} warm-up excluded) · step {1e3 * dev.step_time_s:,.1f} ms, "
            f"{per_step}"
        )
        out_console.print(_table(dev.phases, title, dev.diagnostics.get("confidence")))
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
    note(f"wrote {path}")


def register(app: typer.Typer) -> None:
    app.command("attribute")(attribute_cmd)
