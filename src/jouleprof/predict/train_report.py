"""The printed accuracy table of the training-energy law (`jouleprof predict evaluate --train`)."""

from __future__ import annotations

from typing import Any


def _pct(v: float | None, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"Training-energy law, BERT on one {result['gpu'].upper()} "
        f"({result['n_configs']} configs), J per step"
    )
    for c in (
        "split",
        "train",
        "test",
        "MAPE %",
        "worst %",
        "R²",
        "time MAPE %",
        "interval ±%",
        "covered",
        "FLOPs×J/FLOP MAPE %",
        "linear F,M MAPE %",
    ):
        t.add_column(c, justify="right")
    for r in result["splits"]:
        t.add_row(
            r["split"],
            str(r["n_train"]),
            str(r["n_test"]),
            _pct(r["mape_pct"]),
            _pct(r["worst_pct"], "+.1f"),
            _pct(r["r2"], ".3f"),
            _pct(r["time_mape_pct"]),
            _pct(r["interval_half_width_pct"]),
            f"{r['interval_covers']}/{r['n_test']}",
            _pct(r["baseline_mape_pct"]),
            _pct(r["linear_baseline_mape_pct"]),
        )
    p = result["pooled"]
    t.add_row(
        "pooled",
        "",
        "",
        _pct(p["mape_pct"]),
        f"±{p['worst_abs_pct']:.1f}",
        _pct(p["r2"], ".3f"),
        "",
        "",
        f"{100 * p['interval_coverage']:.0f} %",
        _pct(p["baseline_mape_pct"]),
        _pct(p["linear_baseline_mape_pct"]),
    )
    console = Console(width=max(Console().width, 150))
    console.print(t)
    for g in result["repeatability"]["groups"]:
        what = "repeats" if g["same_configuration"] else "same proxies"
        console.print(
            f"{what} {', '.join(g['ids'])}: J spread {g['j_spread_pct']:.1f} %, "
            f"s spread {g['s_spread_pct']:.1f} %"
        )
    for s in result["strategies_one_gpu"]:
        console.print(
            f"{s['strategy']} on one GPU ({s['row']}): time ×{s['time_ratio']:.3f}, "
            f"energy ×{s['energy_ratio']:.3f} measured; law from the time ratio "
            f"{s['err_pct']:+.1f} % on energy"
        )
    verdict = "met" if p["target_met"] else "NOT met"
    console.print(f"target MAPE ≤ {p['target_mape_pct']:g} % on every split: {verdict}")
