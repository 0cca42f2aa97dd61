"""What PEFT saves from a probe table (jouleprof.report.probe_savings, and the benchmark script
and `jouleprof summarize` that write it): each method against full fine-tuning of the same cell
coordinates, energy ratios bounded by both cells' bounds; the committed H200 table rebuilds."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _row(method, mem, s, j, lo, hi, status="ok", model="m", ck="off"):
    return {
        "model": model,
        "method": method,
        "precision": "bf16",
        "batch": "4",
        "checkpointing": ck,
        "status": status,
        "trainable_params": "10",
        "peak_mem_mib": str(mem),
        "s_per_step": str(s),
        "j_per_step": str(j),
        "j_per_step_lo": str(lo),
        "j_per_step_hi": str(hi),
        "error": "",
    }


def _probe_dir(tmp_path, rows) -> Path:
    """A probe directory holding `rows` as its probe.csv."""
    import csv

    probe = tmp_path / "probe"
    probe.mkdir()
    with (probe / "probe.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return probe


def test_ratios_against_full_with_combined_bounds(load_benchmark):
    from jouleprof.report import probe_savings as sv

    rows = [
        _row("full", 1000, 0.2, 40, 38, 42),
        _row("lora", 800, 0.1, 30, 29, 31),
        _row("full", 500, 0.3, 60, 57, 63, ck="on"),
        _row("bitfit", "", "", "", "", "", status="error"),
    ]
    out = {(r["method"], r["checkpointing"]): r for r in sv.savings(rows)}
    lora = out[("lora", "off")]
    assert lora["mem_vs_full"] == pytest.approx(0.8)
    assert lora["s_vs_full"] == pytest.approx(0.5)
    assert lora["j_vs_full"] == pytest.approx(0.75)
    assert lora["j_vs_full_lo"] == pytest.approx(29 / 42)
    assert lora["j_vs_full_hi"] == pytest.approx(31 / 38)
    assert out[("full", "on")]["j_vs_full"] == pytest.approx(1.0)  # its own baseline
    assert "j_vs_full" not in out[("bitfit", "off")]


def test_repeat_spread_from_pairs_and_the_widened_ratio(load_benchmark):
    import math

    from jouleprof.report import probe_savings as sv

    first = [_row("full", 1000, 0.2, 40, 38, 42), _row("lora", 800, 0.1, 30, 29, 31)]
    again = [
        _row("full", 1000, 0.2 * math.e**0.1, 40 * math.e**0.2, 0, 0),
        _row("lora", 800, 0.1, 30 * math.e**-0.2, 0, 0),
        _row("bitfit", 700, 0.1, 20, 19, 21),  # not in the first: no pair
        _row("full", 1000, 0.2, 40, 38, 42, model="other", status="oom"),
    ]
    spread = sv.repeat_spread(first, again)
    assert spread["n_pairs"] == 2
    # one measurement's log-sd: sqrt(mean(d^2) / 2)
    assert spread["sigma_j"] == pytest.approx(math.sqrt((0.04 + 0.04) / 2 / 2))
    assert spread["sigma_s"] == pytest.approx(math.sqrt((0.01 + 0.0) / 2 / 2))
    lo, hi = sv.widen(0.9, 1.1, 0.05)
    f = math.exp(1.96 * math.sqrt(2) * 0.05)
    assert (lo, hi) == (pytest.approx(0.9 / f), pytest.approx(1.1 * f))
    lora = {r["method"]: r for r in sv.savings(first, sigma_j=0.05)}["lora"]
    assert lora["j_vs_full_rep_lo"] == pytest.approx(29 / 42 / f)
    assert lora["j_vs_full_rep_hi"] == pytest.approx(31 / 38 * f)
    assert "j_vs_full_rep_lo" not in {r["method"]: r for r in sv.savings(first)}["lora"]


def test_ratio_spread_cancels_what_moves_both_cells_alike(load_benchmark):
    import math

    from jouleprof.report import probe_savings as sv

    # 25 coordinates; in the second table every cell of a coordinate is 30 % slower and dearer
    # (one session's pace), and lora's ratio moves by exp(+-0.05) on top.
    first, again = [], []
    for i in range(25):
        m = f"m{i}"
        first += [
            _row("full", 1000, 0.2, 40, 39, 41, model=m),
            _row("lora", 800, 0.1, 30, 29, 31, model=m),
        ]
        e = 0.05 if i % 2 else -0.05
        again += [
            _row("full", 1000, 0.26, 52, 51, 53, model=m),
            _row("lora", 800, 0.13 * math.exp(e), 39 * math.exp(e), 38, 40, model=m),
        ]
    spread = sv.repeat_spread(first, again)
    assert spread["n_ratio_pairs"] == 25
    assert spread["sigma_ratio_j"] == pytest.approx(0.05 / math.sqrt(2))
    assert spread["sigma_ratio_s"] == pytest.approx(0.05 / math.sqrt(2))
    assert spread["sigma_j"] > 0.18  # the cells alone moved by ~26 %
    sj, ss, how = sv.ratio_sigmas(spread)
    assert (sj, ss) == (spread["sigma_ratio_j"], spread["sigma_ratio_s"]) and "25 ratios" in how
    lora = {r["method"]: r for r in sv.savings(first[:2], sigma_ratio_j=sj, sigma_ratio_s=ss)}[
        "lora"
    ]
    f = math.exp(1.96 * sj)
    assert lora["j_vs_full_rep_lo"] == pytest.approx(29 / 41 / f)
    g = math.exp(1.96 * ss)
    assert lora["s_vs_full_rep_lo"] == pytest.approx(0.5 / g)
    assert lora["s_vs_full_rep_hi"] == pytest.approx(0.5 * g)
    # Too few repeated ratios: the cells' spread, combined, and no s/step interval.
    few = sv.repeat_spread(first[:4], again[:4])
    sj2, ss2, _ = sv.ratio_sigmas(few)
    assert ss2 is None and sj2 == pytest.approx(math.sqrt(2) * few["sigma_j"])


@pytest.mark.parametrize(
    "probe, repeat, saved",
    [
        ("probe", "repeat/probe", "savings"),  # the 3 s table, against its 12 repeated cells
        ("probe_5s", "probe", "savings_5s"),  # the 5 s table, against the whole 3 s table
    ],
)
def test_the_committed_h200_savings_rebuild(load_benchmark, tmp_path, probe, repeat, saved):
    base = "benchmarks/results/video_probe"
    src, rep = ROOT / base / probe / "probe.csv", ROOT / base / repeat / "probe.csv"
    if not src.exists() or not rep.exists():
        pytest.skip("no committed probe results")
    sv = load_benchmark("video_probe_savings")
    assert sv.main([str(src), "--repeat", str(rep), "--out", str(tmp_path / "s")]) == 0
    for suffix in (".csv", ".md"):
        committed = (ROOT / base / f"{saved}{suffix}").read_text()
        rebuilt = (tmp_path / f"s{suffix}").read_text()
        # the repeat file's path is printed as given
        rebuilt = rebuilt.replace(str(rep), f"{base}/{repeat}/probe.csv")
        assert rebuilt == committed


def test_summarize_writes_the_savings_of_a_probe_directory(tmp_path):
    import csv

    from typer.testing import CliRunner

    from jouleprof.cli.main import app

    probe = _probe_dir(
        tmp_path, [_row("full", 1000, 0.2, 40, 38, 42), _row("lora", 800, 0.1, 30, 29, 31)]
    )
    r = CliRunner().invoke(app, ["summarize", str(probe)])
    assert r.exit_code == 0, r.output
    md = (probe / "probe_savings.md").read_text()
    assert "| m | lora |" in md and "-20 %" in md  # 800 MiB against full's 1000
    with (probe / "probe_savings.csv").open() as f:
        lora = next(x for x in csv.DictReader(f) if x["method"] == "lora")
    assert float(lora["j_vs_full"]) == pytest.approx(30 / 40)
    bad = CliRunner().invoke(app, ["summarize", str(probe), "--repeat", str(tmp_path / "no")])
    assert bad.exit_code == 2
    other = CliRunner().invoke(app, ["summarize", str(tmp_path)])  # neither study nor probe
    assert other.exit_code == 2


def test_a_probe_without_gpu_figures_is_summarized_with_what_it_has(tmp_path):
    """A probe on a machine without a GPU records no memory and no energy: the table says n/a
    there and still compares the times (a CPU probe once ended summarize with a TypeError)."""

    from typer.testing import CliRunner

    from jouleprof.cli.main import app

    probe = _probe_dir(
        tmp_path, [_row("full", "", 0.2, "", "", ""), _row("lora", "", 0.1, "", "", "")]
    )
    r = CliRunner().invoke(app, ["summarize", str(probe)])
    assert r.exit_code == 0, r.output
    md = (probe / "probe_savings.md").read_text()
    (lora,) = [line for line in md.splitlines() if line.startswith("| m | lora |")]
    assert lora.split("|")[4].strip() == "n/a"  # peak MiB
    assert "-50 %" in lora and "n/a" in lora.split("|")[8]  # s/step halves; J/step n/a
