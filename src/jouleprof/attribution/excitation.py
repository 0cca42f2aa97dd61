"""What excitation cost a run: excited steps against plain ones (pure functions).

An excited run (`timeline.excite`) records its gaps as phase ``excite_gap``; a step holding one
is excited. Its cost per excited step is the difference to the plain steps of the same run:

- time: the mean step time of excited steps minus that of plain steps (gaps, and what
  draining the launch queue costs the next phase);
- energy: each step's energy from the fit (each phase's fitted power × its time in that step,
  the gaps at their own fitted power), excited minus plain. The fit is what the run measured
  (its counter and power readings); its source says so.

Over the whole run, the cost is that per excited step times the share of steps excited.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jouleprof.timeline.excite import GAP_PHASE


def _step_table(spans, steps) -> tuple[dict[int, float], dict[int, dict[str, float]]]:
    """Per step: its time (hull of its spans) and its top-level phases' time."""
    s = spans[spans["step"].isin(steps)]
    top = s[~s["phase"].astype(str).str.contains("/")]
    hull = s.groupby("step").agg(t0=("t0_s", "min"), t1=("t1_s", "max"))
    time_s = (hull["t1"] - hull["t0"]).to_dict()
    dur = (top["t1_s"] - top["t0_s"]).groupby([top["step"], top["phase"]]).sum()
    per: dict[int, dict[str, float]] = {}
    for (step, phase), v in dur.items():
        per.setdefault(int(step), {})[str(phase)] = float(v)
    return {int(k): float(v) for k, v in time_s.items()}, per


def overhead(spans, res: Any, drawn: set[int] | None = None) -> dict[str, Any]:
    """Excitation's cost in the analysed steps of `res` (a DeviceAttribution of the run whose
    spans.csv is `spans`): per excited step and over the run, in time and energy. `drawn`: the
    steps to count as excited (default: those holding an excitation gap;
    `repeat_rule.repeated_steps` for a run that repeated phases)."""
    steps = sorted(int(x) for x in spans["step"].unique())
    used = steps[res.warmup_steps : res.warmup_steps + res.n_steps]
    time_s, per = _step_table(spans, used)
    if drawn is None:
        excited = [s for s in used if GAP_PHASE in per.get(s, {})]
    else:
        excited = [s for s in used if s in drawn]
    plain = [s for s in used if s not in set(excited)]
    out: dict[str, Any] = {
        "n_excited": len(excited),
        "n_plain": len(plain),
        "source": "fit (each phase's fitted power × its time per step)",
    }
    if not excited or not plain:
        out["note"] = "no excited steps" if not excited else "no plain steps to compare with"
        return out
    power = dict(res.diagnostics.get("fitted_power_w") or {})
    for p in res.phases:
        if p.phase not in power and p.mean_power_w is not None:
            power[p.phase] = p.mean_power_w
    gap_j = [per[s].get(GAP_PHASE, 0.0) * power.get(GAP_PHASE, np.nan) for s in excited]

    def energy(s: int) -> float:
        tracked = sum(per[s].values())
        e = sum(t * power.get(ph, np.nan) for ph, t in per[s].items())
        return e + max(time_s[s] - tracked, 0.0) * power.get("untracked", 0.0)

    tx, tp = np.array([time_s[s] for s in excited]), np.array([time_s[s] for s in plain])
    ex, ep = np.array([energy(s) for s in excited]), np.array([energy(s) for s in plain])
    t_x, t_p, e_x, e_p = (float(np.mean(a)) for a in (tx, tp, ex, ep))
    frac = len(excited) / len(used)
    out.update(
        step_ms_plain=1e3 * t_p,
        step_ms_excited=1e3 * t_x,
        gap_ms_per_excited_step=1e3 * float(np.mean([per[s].get(GAP_PHASE, 0.0) for s in excited])),
        gap_j_per_excited_step=float(np.mean(gap_j)) if drawn is None else None,
        time_overhead_pct_per_excited_step=100 * (t_x - t_p) / t_p,
        step_j_plain=e_p,
        step_j_excited=e_x,
        energy_overhead_pct_per_excited_step=100 * (e_x - e_p) / e_p if e_p else None,
        share_excited=frac,
        run_time_overhead_pct=100 * frac * (t_x - t_p) / t_p,
        run_energy_overhead_pct=100 * frac * (e_x - e_p) / e_p if e_p else None,
        # 95 % half-widths of the differences (normal, unequal variances): steps that vary by
        # themselves (a data-bound step) can hide what the variation costs
        step_ms_diff_hw=1e3 * _diff_hw(tx, tp),
        step_j_diff_hw=_diff_hw(ex, ep),
    )
    return out


def _diff_hw(a: np.ndarray, b: np.ndarray) -> float:
    """1.96 × the standard error of mean(a) − mean(b) (NaN where either has one value)."""
    if len(a) < 2 or len(b) < 2:
        return float("nan")
    return 1.96 * float(np.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b)))


def cost_note(cost: dict[str, Any], what: str) -> str | None:
    """One line for the run's notes: what `what` ("excitation", "phase repetition") cost, from
    `overhead`'s record; None where nothing was excited or compared."""
    if "run_time_overhead_pct" not in cost:
        return None
    e_step = cost.get("energy_overhead_pct_per_excited_step")
    e_run = cost.get("run_energy_overhead_pct")

    def pm(hw: float | None, scale: float = 1.0, digits: int = 2) -> str:
        return f" ±{scale * hw:.{digits}f}" if hw is not None and np.isfinite(hw) else ""

    e_p = cost.get("step_j_plain")
    e_hw = cost.get("step_j_diff_hw")
    energy = (
        f", {e_step:+.1f}{pm(e_hw, 100 / e_p, 1)} % energy (fitted)"
        if e_step is not None and np.isfinite(e_step) and e_p
        else ""
    )
    run_e = f", {e_run:+.2f} % energy" if e_run is not None and np.isfinite(e_run) else ""
    return (
        f"{what} cost: {cost['n_excited']} of {cost['n_excited'] + cost['n_plain']} analysed "
        f"steps drawn, each {cost['step_ms_excited'] - cost['step_ms_plain']:+.2f}"
        f"{pm(cost.get('step_ms_diff_hw'))} ms "
        f"({cost['time_overhead_pct_per_excited_step']:+.1f} %){energy} against the plain "
        f"steps (95 %); over the run {cost['run_time_overhead_pct']:+.2f} % time{run_e}"
    )


COST_KEYS: tuple[str, ...] = ("excitation_cost", "repeat_cost")
"""The diagnostics in which attribution records what the step's variations cost."""


def record_costs(status: dict[str, Any], result: Any) -> None:
    """Put `result`'s cost lines (`cost_lines`) in a method's attribution status (run.json
    ``extra["attribution"][method]["costs"]``), where it has any."""
    if lines := cost_lines(result):
        status["costs"] = lines


def recorded_costs(extra: dict[str, Any]) -> list[str]:
    """The regression's cost lines a run's record keeps (`record_costs`), for the terminal."""
    return ((extra.get("attribution") or {}).get("regression") or {}).get("costs", [])


def cost_lines(result: Any) -> list[str]:
    """The cost lines of an `AttributionResult`'s devices ("gpu0: excitation cost: ..."), for
    a run's record and a terminal."""
    return [
        f"{d.device}: {d.diagnostics[k]['line']}"
        for d in result.devices
        for k in COST_KEYS
        if "line" in (d.diagnostics.get(k) or {})
    ]
