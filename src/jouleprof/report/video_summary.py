"""Tables of a video study: every run, the best configuration per model by NS#, the
confirmation's spread over seeds, and which differences the measurement can resolve.

Pure reads of the study directory (study.json, cells/*/cell.json and run.json): rerunnable on a
copied study. Writes ``video_runs.csv`` (one row per cell) and ``video_summary.md``.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path
from typing import Any

RUNS_CSV = "video_runs.csv"
SUMMARY_MD = "video_summary.md"
COLUMNS = (
    "cell_id",
    "stage",
    "model",
    "method",
    "precision",
    "checkpointing",
    "lr",
    "epochs",
    "seed",
    "status",
    "val_top1_pct",
    "val_clips",
    "test_top1_pct",
    "train_peak_mem_mib",
    "train_time_s",
    "train_s_per_step",
    "train_energy_j",
    "train_energy_lo_j",
    "train_energy_hi_j",
    "train_j_per_step",
    "deploy_latency_ms",
    "deploy_energy_per_clip_j",
    "deploy_energy_per_clip_lo_j",
    "deploy_energy_per_clip_hi_j",
    "deploy_peak_mem_mib",
    "deploy_measured_in",
    "ns_e",
    "ns_m",
    "ns_hash",
    "ns_hash_lo",
    "ns_hash_hi",
    "ns_hash_lo_acc",
    "ns_hash_hi_acc",
    "energy_source",
    "error",
)


def _json(path: Path) -> dict[str, Any]:
    try:
        d = json.loads(path.read_text())
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def _measured_in(cell_id: str, dep: dict[str, Any]) -> str | None:
    """Where a cell's deployment cost was measured: itself, or the run it took it from."""
    if not dep:
        return None
    src = dep.get("reused_from")
    return Path(src["run_dir"]).name if src else cell_id


def _fig(d: dict[str, Any] | None, key: str = "value") -> Any:
    return (d or {}).get(key)


def cell_rows(study_dir: Path) -> list[dict[str, Any]]:
    """One row per cell directory (COLUMNS), in cell_id order."""
    from jouleprof.bench.index import cell_status

    rows = []
    for cdir in sorted((study_dir / "cells").glob("*")):
        if not cdir.is_dir():
            continue
        factors = _json(cdir / "cell.json").get("factors") or {}
        status, error = cell_status(cdir)
        run = _json(cdir / "run.json")
        video = (run.get("extra") or {}).get("video") or {}
        epochs = video.get("epochs") or []
        val = epochs[-1]["val"] if epochs else {}
        ad = video.get("adaptation") or {}
        dep = video.get("deployment") or {}
        ns = (video.get("scores") or {}).get("deploy") or {}
        nsh = ns.get("ns_hash") or {}
        steps = ad.get("steps") or 0
        energy = ad.get("energy") or {}
        row = {
            "cell_id": cdir.name,
            **{k: factors.get(k) for k in COLUMNS[1:9]},
            "status": status,
            "val_top1_pct": val.get("top1_pct"),
            "val_clips": val.get("clips"),
            "test_top1_pct": (video.get("test") or {}).get("top1_pct"),
            "train_peak_mem_mib": ad.get("peak_mem_allocated_mib"),
            "train_time_s": ad.get("time_s"),
            "train_s_per_step": ad["time_s"] / steps if steps else None,
            "train_energy_j": _fig(energy),
            "train_energy_lo_j": _fig(energy, "lo"),
            "train_energy_hi_j": _fig(energy, "hi"),
            "train_j_per_step": _fig(energy) / steps if steps and _fig(energy) else None,
            "deploy_latency_ms": 1e3 * dep["latency_s_mean"] if dep.get("latency_s_mean") else None,
            "deploy_energy_per_clip_j": _fig(dep.get("energy_per_clip")),
            "deploy_energy_per_clip_lo_j": _fig(dep.get("energy_per_clip"), "lo"),
            "deploy_energy_per_clip_hi_j": _fig(dep.get("energy_per_clip"), "hi"),
            "deploy_peak_mem_mib": (dep.get("peak_mem_allocated_bytes") or 0) / 2**20 or None,
            "deploy_measured_in": _measured_in(cdir.name, dep),
            "ns_e": _fig(ns.get("ns_e")),
            "ns_m": _fig(ns.get("ns_m")),
            "ns_hash": nsh.get("value"),
            "ns_hash_lo": nsh.get("lo"),
            "ns_hash_hi": nsh.get("hi"),
            "ns_hash_lo_acc": nsh.get("lo_acc"),
            "ns_hash_hi_acc": nsh.get("hi_acc"),
            "energy_source": energy.get("source") if energy else None,
            "error": error or None,
        }
        if row["energy_source"] == "estimated" and "simulat" in (energy.get("reason") or ""):
            row["energy_source"] = "simulated"
        if row["energy_source"] == "unavailable":
            row["energy_source"] = f"unavailable ({energy.get('reason')})"
        rows.append(row)
    return rows


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def _config(r: dict[str, Any]) -> str:
    ck = ", ckpt" if r.get("checkpointing") else ""
    return f"{r['method']}, {r['precision']}{ck}, lr {r['lr']:.0e}"


def _interval(r: dict[str, Any], lo: str = "ns_hash_lo", hi: str = "ns_hash_hi") -> str:
    if r.get(lo) is None or r.get(hi) is None:
        return "n/a"
    return f"[{r[lo]:.2f}, {r[hi]:.2f}]"


def _overlaps(a: dict[str, Any], b: dict[str, Any], lo: str, hi: str) -> bool:
    if None in (a.get(lo), a.get(hi), b.get(lo), b.get(hi)):
        return False
    return a[lo] <= b[hi] and b[lo] <= a[hi]


def best_per_model(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model, the search run with the highest NS#, and how the others compare with it.

    Each entry: model, best (row), tied (rows whose NS# interval from the measurement overlaps
    the best's: the meter cannot order them), within_accuracy (rows outside that but inside the
    accuracy's sampling interval), runner_up (the next row by NS#), n_runs.
    """
    done = [r for r in rows if r["status"] == "complete" and r.get("stage") != "confirm"]
    search = [r for r in done if r.get("stage") != "smoke"] or done
    out = []
    for model in sorted({r["model"] for r in search if r.get("model")}):
        mine = [r for r in search if r["model"] == model and r.get("ns_hash") is not None]
        if not mine:
            # No NS# (no GPU memory or energy was measured): rank by top-1, and say so.
            top = [r for r in search if r["model"] == model and r.get("val_top1_pct") is not None]
            top.sort(key=lambda r: (-r["val_top1_pct"], r["cell_id"]))
            out.append(
                {
                    "model": model,
                    "best": None,
                    "by_top1": top[0] if top else None,
                    "n_runs": len(top),
                    "tied": [],
                    "within_accuracy": [],
                    "runner_up": None,
                }
            )
            continue
        mine.sort(key=lambda r: (-r["ns_hash"], r["cell_id"]))
        best, others = mine[0], mine[1:]
        tied = [r for r in others if _overlaps(best, r, "ns_hash_lo", "ns_hash_hi")]
        acc = [
            r
            for r in others
            if r not in tied and _overlaps(best, r, "ns_hash_lo_acc", "ns_hash_hi_acc")
        ]
        out.append(
            {
                "model": model,
                "best": best,
                "n_runs": len(mine),
                "tied": tied,
                "within_accuracy": acc,
                "runner_up": others[0] if others else None,
            }
        )
    return out


def confirm_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per confirmed configuration: seeds, test/val top-1 and NS# mean and standard deviation."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("stage") == "confirm" and r["status"] == "complete":
            key = (r["model"], r["method"], r["precision"], r["checkpointing"], r["lr"])
            groups.setdefault(key, []).append(r)
    out = []
    for key, rs in sorted(groups.items(), key=lambda kv: str(kv[0])):
        entry = {"model": key[0], "config": _config(rs[0]), "seeds": len(rs)}
        for col in ("test_top1_pct", "val_top1_pct", "ns_hash"):
            vals = [r[col] for r in rs if r.get(col) is not None]
            entry[col] = statistics.fmean(vals) if vals else None
            entry[col + "_sd"] = statistics.stdev(vals) if len(vals) > 1 else None
        out.append(entry)
    return out


def peft_savings(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model, precision and checkpointing: each method's training cost next to full
    fine-tuning's (search runs; of several learning rates, the one with the best top-1)."""
    pick: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        if r["status"] != "complete" or r.get("stage") not in ("search-lr", "search-ablation"):
            continue
        key = (r["model"], r["precision"], bool(r["checkpointing"]), r["method"])
        if key not in pick or (r["val_top1_pct"] or 0) > (pick[key]["val_top1_pct"] or 0):
            pick[key] = r
    out = []
    for (model, prec, ck, method), r in sorted(pick.items()):
        full = pick.get((model, prec, ck, "full"))
        if full is None or method == "full":
            continue

        def ratio(col, r=r, full=full):
            a, b = r.get(col), full.get(col)
            return a / b if a is not None and b else None

        out.append(
            {
                "model": model,
                "precision": prec,
                "checkpointing": ck,
                "method": method,
                "mem_ratio": ratio("train_peak_mem_mib"),
                "s_per_step_ratio": ratio("train_s_per_step"),
                "j_per_step_ratio": ratio("train_j_per_step"),
                "j_per_step": r.get("train_j_per_step"),
                "full_j_per_step": full.get("train_j_per_step"),
                "row": r,
                "full": full,
            }
        )
    return out


def _j_step_interval(r: dict[str, Any]) -> str:
    steps = (r.get("train_time_s") or 0) / r["train_s_per_step"] if r.get("train_s_per_step") else 0
    if not steps or r.get("train_energy_lo_j") is None:
        return "n/a"
    return (
        f"{r['train_j_per_step']:.2f} [{r['train_energy_lo_j'] / steps:.2f}, "
        f"{r['train_energy_hi_j'] / steps:.2f}]"
    )


def _statement(b: dict[str, Any]) -> str:
    best = b["best"]
    head = f"- **{b['model']}**: {_config(best)} (NS# {best['ns_hash']:.2f} {_interval(best)})"
    if b["tied"]:
        names = "; ".join(f"{_config(r)} ({r['ns_hash']:.2f} {_interval(r)})" for r in b["tied"])
        return head + (
            f" is tied, within the measurement's uncertainty, with {len(b['tied'])} "
            f"other run(s): {names}. The meter cannot order these."
        )
    ru = b["runner_up"]
    if ru is None:
        return head + ": the only run of this model with an NS#."
    text = head + (
        f" beats the runner-up {_config(ru)} ({ru['ns_hash']:.2f} {_interval(ru)}) by "
        f"{best['ns_hash'] - ru['ns_hash']:.2f}, outside the measurement's uncertainty"
    )
    if b["within_accuracy"]:
        text += (
            f"; but {len(b['within_accuracy'])} run(s) are inside the accuracy's sampling "
            f"interval ({best.get('val_clips')} validation clips), so another draw of clips "
            "could reorder them"
        )
    return text + "."


def write_summary(study_dir: str | Path) -> tuple[Path, Path]:
    """Writes video_runs.csv and video_summary.md into the study; returns their paths."""
    study_dir = Path(study_dir)
    spec = _json(study_dir / "study.json")
    if not (study_dir / "cells").is_dir():
        raise ValueError(f"{study_dir} holds no cells/: give a study directory")
    rows = cell_rows(study_dir)
    csv_path = study_dir / RUNS_CSV
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    best = best_per_model(rows)
    sources = sorted({r["energy_source"] for r in rows if r.get("energy_source")})
    n_done = sum(r["status"] == "complete" for r in rows)
    lines = [
        f"# Video study: {study_dir.name}",
        "",
        f"Dataset: {spec.get('dataset', 'n/a')}; models {', '.join(spec.get('models', []))}; "
        f"{len(rows)} cells, {n_done} complete, "
        f"{sum(r['status'] == 'oom' for r in rows)} out of memory, "
        f"{sum(r['status'] in ('failed', 'incomplete') for r in rows)} failed.",
        f"Energy source: {', '.join(sources) or 'n/a'}. NS# uses the deployed model's latency, "
        "power and peak memory; its interval is the measurement's (accuracy fixed), the "
        "'with accuracy' interval adds the validation accuracy's 95 % Wilson interval.",
        "",
        "## Best configuration per model by NS# (search runs)",
        "",
        "| Model | Best by NS# | Val top-1 % | Peak train MiB | Train J | Deploy J/clip "
        "| NS# | NS# interval | with accuracy | runs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b in best:
        r = b["best"]
        if r is None:
            t = b.get("by_top1")
            pick = f"no NS#; by top-1: {_config(t)}" if t else "no complete run"
            lines.append(
                f"| {b['model']} | {pick} | {_fmt(t and t['val_top1_pct'])} | | | | | | | "
                f"{b['n_runs']} |"
            )
            continue
        lines.append(
            f"| {b['model']} | {_config(r)} | {_fmt(r['val_top1_pct'])} | "
            f"{_fmt(r['train_peak_mem_mib'], 0)} | {_fmt(r['train_energy_j'], 1)} | "
            f"{_fmt(r['deploy_energy_per_clip_j'], 3)} | {_fmt(r['ns_hash'])} | {_interval(r)} | "
            f"{_interval(r, 'ns_hash_lo_acc', 'ns_hash_hi_acc')} | {b['n_runs']} |"
        )
    lines += ["", "Ties and differences:", ""]
    lines += [_statement(b) for b in best if b["best"] is not None] or [
        "- no run has an NS# (it needs the deployed model's peak GPU memory and power: "
        "unavailable without a GPU; see each run's scores for the reason)."
    ]
    savings = peft_savings(rows)
    if savings:
        lines += [
            "",
            "## What PEFT saves in training (against full fine-tuning, same precision)",
            "",
            "| Model | Precision | Method | Peak MiB (× full) | s/step (× full) "
            "| J/step [bounds] | full's J/step [bounds] |",
            "|---|---|---|---|---|---|---|",
        ]
        for v in savings:
            r, f = v["row"], v["full"]
            prec = v["precision"] + (", ckpt" if v["checkpointing"] else "")
            lines.append(
                f"| {v['model']} | {prec} | {v['method']} | {_fmt(r['train_peak_mem_mib'], 0)} "
                f"({_fmt(v['mem_ratio'])}) | {_fmt(r['train_s_per_step'], 3)} "
                f"({_fmt(v['s_per_step_ratio'])}) | {_j_step_interval(r)} | {_j_step_interval(f)} |"
            )
    conf = confirm_table(rows)
    if conf:
        lines += [
            "",
            "## Confirmation (mean ± sd over seeds, with test)",
            "",
            "| Model | Configuration | Seeds | Test top-1 % | Val top-1 % | NS# |",
            "|---|---|---|---|---|---|",
        ]
        for c in conf:

            def ms(k, c=c):
                return f"{_fmt(c[k])} ± {_fmt(c[k + '_sd'])}"

            lines.append(
                f"| {c['model']} | {c['config']} | {c['seeds']} | "
                f"{ms('test_top1_pct')} | {ms('val_top1_pct')} | {ms('ns_hash')} |"
            )
    lines += [
        "",
        "## All runs",
        "",
        "| Cell | Status | Val top-1 % | Peak train MiB | s/step | J/step | NS# |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['cell_id']} | {r['status']} | {_fmt(r['val_top1_pct'])} | "
            f"{_fmt(r['train_peak_mem_mib'], 0)} | {_fmt(r['train_s_per_step'], 3)} | "
            f"{_fmt(r['train_j_per_step'], 2)} | {_fmt(r['ns_hash'])} |"
        )
    md_path = study_dir / SUMMARY_MD
    md_path.write_text("\n".join(lines) + "\n")
    return md_path, csv_path
