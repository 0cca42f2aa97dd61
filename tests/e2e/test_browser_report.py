"""The HTML reports in a real headless browser (Debian's chromium, driven over the DevTools
protocol): each renders, every figure loads, nothing is logged as an error, and the numbers
shown are run.json's. Skips with the reason where chromium or websocket-client is absent.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from jouleprof.types import Figure, Source

CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
)


class Browser:
    """One headless chromium, one page, spoken to over the DevTools protocol."""

    def __init__(self, profile: Path) -> None:
        import websocket  # websocket-client

        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.is_file() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                pytest.fail("chromium did not open its DevTools port within 30 s")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30)
        self.n = 0
        self.events: list[dict] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def call(self, method: str, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def open(self, path: Path) -> None:
        """Load a file and wait for its load event; the page's events start afresh."""
        self.events = []
        self.call("Page.navigate", url=path.absolute().as_uri())
        deadline = time.monotonic() + 30
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                pytest.fail(f"{path} did not finish loading within 30 s")
            self.events.append(json.loads(self.ws.recv()))

    def js(self, expr: str):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads since the page was opened."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails'].get('text')}")
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(f"console.{p['type']}: {p.get('args')}")
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} ({p['entry'].get('url')})")
            elif m == "Network.loadingFailed" and not p.get("canceled"):
                out.append(f"load failed: {p.get('errorText')}")
        return out

    def close(self) -> None:
        try:
            if hasattr(self, "ws"):
                self.call("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip("no chromium to check the HTML in: apt-get install chromium")
    pytest.importorskip(
        "websocket", reason="websocket-client not installed: pip install websocket-client"
    )
    if os.geteuid() == 0 and "--no-sandbox" not in FLAGS:
        pytest.skip("chromium needs --no-sandbox as root")
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


def sim_cell(path: Path) -> Path:
    """A fine cell with telemetry and phases (the simulated workload), summarized and attributed
    like a real one."""
    from jouleprof.bench.cellsummary import finish_cell
    from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training
    from jouleprof.store.rundir import RunDir
    from jouleprof.types import RunRecord, RunStatus

    spec = [
        PhaseSpec("data", 0.004, 150.0),
        PhaseSpec("forward", 0.06, 480.0),
        PhaseSpec("backward", 0.10, 600.0),
        PhaseSpec("optimizer", 0.035, 430.0),
    ]
    sim = simulate_training(spec, 24, seed=3)
    t0, t1 = sim.spans[0].t0_s, sim.spans[-1].t1_s
    rec = RunRecord(
        run_id=path.name,
        kind="cell",
        status=RunStatus.COMPLETE,
        config={"cell": {"workload": "vjepa2", "preset": "tiny", "mode": "fine", "batch_size": 2}},
        hardware={"gpus": [{"device": "gpu0", "name": "NVIDIA H200"}], "driver_version": "580"},
        extra={"mode": "fine", "trained_on": "cuda"},
    )
    rec.extra["measured_segment"] = {"t0_s": t0, "t1_s": t1, "steps": 24, "samples": 48}
    rd = RunDir.create(path, rec)
    for writer, rows in ((rd.sample_writer(), sim.samples), (rd.span_writer(), sim.spans)):
        writer.write(rows)
        writer.close()
    finish_cell(path)
    rec = rd.read_record()
    rec.summary["throughput_samples_per_s"] = Figure.measured(12.3456, "samples/s", signal="timer")
    rd.write_record(rec)
    return path


def as_simulated(src: Path, dst: Path) -> Path:
    """A copy of a run, marked as a CPU run whose GPU figures came from the simulated GPU."""
    from jouleprof.store.rundir import RunDir

    shutil.copytree(src, dst)
    rd = RunDir(dst)
    rec = rd.read_record()
    rec.extra["trained_on"] = "cpu"
    rec.extra["simulated_gpu"] = {"source": "simulated", "note": "SIMULATED: no GPU was measured"}
    for k, f in list(rec.summary.items()):
        if f.unit == "J" and f.value is not None:
            rec.summary[k] = Figure(f.value, f.unit, Source.SIMULATED, lo=f.lo, hi=f.hi)
    rd.write_record(rec)
    return dst


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return sim_cell(tmp_path_factory.mktemp("runs") / "run")


def _number(text: str) -> float:
    m = re.search(r"[−-]?[\d,]*\.?\d+(?:e[−-]?\d+)?", text)
    assert m, text
    return float(m.group().replace(",", "").replace("−", "-"))


def test_run_report_in_a_browser(browser, run_dir):
    from jouleprof.report import write_run_report

    run = run_dir
    html = write_run_report(run)
    browser.open(html)
    assert browser.errors() == []
    sections = browser.js("Array.from(document.querySelectorAll('section')).map(s => s.id)")
    assert sections[:2] == ["answer", "timelines"]  # the answer first, then the timelines
    images = browser.js(
        "Array.from(document.images).map(i => [i.alt, i.complete && i.naturalWidth > 0])"
    )
    assert len(images) >= 4 and all(ok for _, ok in images), images
    summary = json.loads((run / "run.json").read_text())["summary"]
    shown = browser.js(
        "Array.from(document.querySelectorAll('[data-key]'))"
        ".map(e => [e.dataset.key, e.dataset.value || null, e.textContent])"
    )
    assert {"segment_gpu_energy_j", "energy_per_sample_j", "throughput_samples_per_s"} <= {
        k for k, _, _ in shown
    }
    for key, value, text in shown:
        want = summary[key]["value"]
        if want is None:
            assert value is None and text.startswith("unavailable")
            continue
        assert float(value) == want  # the page carries run.json's number exactly
        assert _number(text) == pytest.approx(want, rel=5e-4), (key, text)  # shown to 4 digits
    badges = browser.js(
        "Array.from(document.querySelectorAll('#answer .src')).map(e => e.textContent)"
    )
    assert set(badges) <= {"measured", "estimated", "predicted", "simulated", "unavailable"}
    assert browser.js("document.getElementById('simulated-banner')") is None
    assert "GPU" in browser.js("document.getElementById('trained-on').textContent")


def test_a_simulated_run_says_so_unmistakably(browser, run_dir, tmp_path):
    from jouleprof.report import write_run_report

    run = as_simulated(run_dir, tmp_path / "sim")
    browser.open(write_run_report(run))
    assert browser.errors() == []
    banner = browser.js(
        "(() => { const b = document.getElementById('simulated-banner');"
        " const r = b.getBoundingClientRect(); return [b.textContent, r.top, r.height]; })()"
    )
    assert "SIMULATED" in banner[0] and banner[2] > 20 and banner[1] < 400  # at the top, visible
    energy = browser.js(
        "document.querySelector('[data-key=segment_gpu_energy_j]').parentElement.textContent"
    )
    assert "simulated" in energy
    assert browser.js("document.getElementById('trained-on').textContent").startswith("CPU")


def test_study_and_compare_pages_in_a_browser(browser, run_dir, tmp_path):
    """A matrix study's page leads with its answer; a comparison marks what differs."""
    import sys

    from jouleprof.bench.matrix import Cell, run_matrix
    from jouleprof.report import write_study_report
    from jouleprof.report.compare import compare_runs, write_compare_html

    prog = (
        "import sys; from jouleprof.store.rundir import RunDir; "
        "from jouleprof.types import Figure, RunRecord, RunStatus; "
        "r = RunRecord(run_id='c', kind='test', status=RunStatus.COMPLETE); "
        "v = float(sys.argv[2]); "
        "r.summary['energy_per_sample_j'] = Figure.measured(v, 'J', lo=v - 0.1, hi=v + 0.1); "
        "RunDir.create(sys.argv[1], r)"
    )
    cells = [
        Cell(f"lr{v}", (sys.executable, "-c", prog, "{cell_dir}", str(v)), {"lr": v}, gpus=0)
        for v in (2.5, 1.5)
    ]
    cells.append(Cell("broken", (sys.executable, "-c", "raise SystemExit(3)"), {"lr": 9.0}, gpus=0))
    study = tmp_path / "study"
    run_matrix(study, {"name": "browser"}, cells, progress=False)
    browser.open(write_study_report(study))
    assert browser.errors() == []
    first = browser.js("document.querySelector('section').id")
    assert first == "answer"
    sentence = browser.js("document.getElementById('answer-sentence').textContent")
    assert "lr1.5" in sentence and "1.5" in sentence and "2 of 3 cells" in sentence
    images = browser.js("Array.from(document.images).map(i => i.complete && i.naturalWidth > 0)")
    assert images and all(images)
    assert "broken" in browser.js("document.getElementById('unfinished').textContent")

    other = as_simulated(run_dir, tmp_path / "other")
    page = write_compare_html(compare_runs([run_dir, other]), tmp_path / "compare.html")
    browser.open(page)
    assert browser.errors() == []
    shown = browser.js(
        "Array.from(document.querySelectorAll('#figures td[data-value]'))"
        ".map(e => [e.dataset.run, e.dataset.key, Number(e.dataset.value)])"
    )
    want = json.loads((run_dir / "run.json").read_text())["summary"]
    for run, key, value in shown:
        if run == "0":
            assert value == want[key]["value"], key
    # Simulated against measured is flagged, never marked as a difference.
    assert "sources differ" in browser.js("document.getElementById('figures').textContent")


VIDEO_STUDY = Path(__file__).resolve().parents[2] / "benchmarks/results/video_study/h200_compact"


@pytest.mark.skipif(not VIDEO_STUDY.is_dir(), reason="the committed H200 video study is absent")
def test_video_study_page_leads_with_the_best_configuration_by_ns(browser, tmp_path):
    """A video study's page (the committed H200 compact study): its answer names each model's
    best run by NS# as `jouleprof summarize` does, with run.json's NS#, and every figure loads."""
    from jouleprof.report import write_study_report
    from jouleprof.report.video_summary import _config, best_per_model, cell_rows

    study = tmp_path / "study"
    shutil.copytree(VIDEO_STUDY, study)
    browser.open(write_study_report(study))
    assert browser.errors() == []
    assert browser.js("document.querySelector('section').id") == "answer"
    said = browser.js(
        "Array.from(document.querySelectorAll('#answer-sentences li')).map(e => e.textContent)"
    )
    best = best_per_model(cell_rows(study))
    assert len(said) == len(best) == 2
    for b, s in zip(best, said, strict=True):
        run = json.loads((study / "cells" / b["best"]["cell_id"] / "run.json").read_text())
        ns = run["extra"]["video"]["scores"]["deploy"]["ns_hash"]["value"]
        assert s.startswith(b["model"]) and _config(b["best"]) in s and f"{ns:.2f}" in s
    answer = browser.js("document.querySelector('#answer table').textContent")
    assert all(f"{b['best']['ns_hash']:.2f}" in answer for b in best)
    images = browser.js("Array.from(document.images).map(i => i.complete && i.naturalWidth > 0)")
    assert len(images) == 2 and all(images)
    assert "seeds" in browser.js("document.getElementById('confirmation').textContent")
    assert "lora" in browser.js("document.getElementById('peft').textContent")


PROBE = Path(__file__).resolve().parents[2] / "benchmarks/results/video_probe/probe_shared"


@pytest.mark.skipif(not PROBE.is_dir(), reason="the committed H200 probe is absent")
def test_probe_page_shows_what_fits_and_what_each_method_saves(browser, tmp_path):
    """A probe's page (the committed H200 probe.csv): the counts of probe.csv, both figures
    loaded, and each method's J/step ratio to full fine-tuning as probe_savings computes it."""
    import csv

    from jouleprof.report import write_study_report

    probe = tmp_path / "probe"
    probe.mkdir()
    shutil.copy(PROBE / "probe.csv", probe / "probe.csv")
    with (probe / "probe.csv").open() as f:
        rows = list(csv.DictReader(f))
    browser.open(write_study_report(probe))
    assert browser.errors() == []
    assert browser.js("document.querySelector('section').id") == "answer"
    first = browser.js("document.querySelector('#answer-sentences li').textContent")
    ok = sum(r["status"] == "ok" for r in rows)
    refused = sum(r["status"] == "refused" for r in rows)
    assert first.startswith(f"{len(rows)} cells: {ok} trained") and f"{refused} refused" in first
    images = browser.js("Array.from(document.images).map(i => i.complete && i.naturalWidth > 0)")
    assert len(images) == 2 and all(images)
    peft = browser.js("document.getElementById('peft').textContent")
    assert "qlora" in peft and "bitfit" in peft
