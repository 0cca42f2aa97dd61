"""The steady inference loop is one function: `jouleprof infer --protocol steady` and the
predictor's dataset collection (benchmarks/predict_collect.py) run the same structure."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from jouleprof.bench import infer_loop  # noqa: E402
from jouleprof.bench.infer import InferConfig, infer_cost  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REAL_ENTER, REAL_EXIT = torch.autocast.__enter__, torch.autocast.__exit__


@pytest.fixture(scope="module")
def collect():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import predict_collect

    return predict_collect


class FakeSampler:
    def __init__(self, events):
        self.devices = ["gpu0"]
        self.events = events

    def densify(self, seconds, read_now=False):
        self.events.append("E")


class FakeMeasurement:
    """What the loop touches of an open `jouleprof.measure`: the sampler's edges and the clock."""

    def __init__(self, events):
        self.sampler = FakeSampler(events)
        self.clock = type("Clock", (), {"now_s": staticmethod(time.perf_counter)})()


def recorded_loop(monkeypatch, run, precision):
    """Events of one window: A+/A- autocast enter/exit, F a pass (with the modes it ran under),
    S a synchronize, E an edge."""
    events: list[str] = []

    def enter(self):
        events.append("A+")
        return REAL_ENTER(self)

    def exit_(self, *a):
        events.append("A-")
        return REAL_EXIT(self, *a)

    monkeypatch.setattr(torch.autocast, "__enter__", enter)
    monkeypatch.setattr(torch.autocast, "__exit__", exit_)
    monkeypatch.setattr(infer_loop, "device_sync", lambda device: lambda: events.append("S"))
    net = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()

    def forward(x):
        im = torch.is_inference_mode_enabled()
        ac = torch.is_autocast_enabled("cpu")
        events.append(f"F[{'i' if im else '-'}{'a' if ac else '-'}]")
        return net(x)

    x = torch.randn(2, 8)
    run(forward, x, FakeMeasurement(events), precision)
    return events


def via_infer(forward, x, m, precision):
    cfg = InferConfig(model="file.py:net", batch=2, precision=precision, protocol="steady",
                      sustained_s=0.02)  # fmt: skip
    infer_cost(forward, x, m, cfg)


def via_collect(collect):
    def run(forward, x, m, precision):
        collect.run_config(forward, x, precision, 0.02, 0.0, m)

    return run


def collapse(events: list[str]) -> str:
    """The event string with the window's repeated (pass, synchronize) pairs as one group."""
    s = " ".join(events)
    return re.sub(r"E( F\[[^\]]*\] S)+ E", r"E (\1)* E", s)


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_infer_and_collection_run_the_identical_loop(monkeypatch, collect, precision):
    a = recorded_loop(monkeypatch, via_infer, precision)
    b = recorded_loop(monkeypatch, via_collect(collect), precision)
    assert collapse(a) == collapse(b)
    mode = "ia" if precision == "bf16" else "i-"
    ac_in, ac_out = ("A+ ", " A-") if precision == "bf16" else ("", "")
    # autocast entered once around everything; 3 warm-ups, one sync; edge; synced passes; edge
    expected = f"{ac_in}F[{mode}] F[{mode}] F[{mode}] S E ( F[{mode}] S)* E{ac_out}"
    assert collapse(a) == expected
    assert a.count("E") == 2 and a.count("F[" + mode + "]") >= 3 + 2


def test_steady_window_refuses_to_run_outside_its_context():
    x = torch.randn(1, 4)
    with pytest.raises(RuntimeError, match="inference_context"):
        infer_loop.steady_window(lambda t: t, x, precision="fp32", window_s=0.01)
    with torch.inference_mode(), pytest.raises(RuntimeError, match="autocast on"):
        infer_loop.steady_window(lambda t: t, x, precision="bf16", window_s=0.01)
    with infer_loop.inference_context("fp32", "cpu"):
        w = infer_loop.steady_window(lambda t: t * 2, x, precision="fp32", window_s=0.01)
    assert w.passes >= 2 and len(w.pass_times_s) == w.passes and w.window_s >= 0.01


def test_random_input_is_seeded_normal():
    a = infer_loop.random_input(4, (3, 8, 8), "cpu")
    b = infer_loop.random_input(4, (3, 8, 8), "cpu")
    assert a.shape == (4, 3, 8, 8) and torch.equal(a, b)
    assert abs(float(a.std()) - 1.0) < 0.2 and not torch.any(a == 0)


def test_collection_plan_runs_the_validation_targets_first(collect):
    todo = collect.plan(collect.MODELS, collect.PLAN, set())
    n = len(collect.MODELS)
    assert [(p, b) for _, _, p, b in todo[:n]] == [("bf16", 64)] * n
    assert [(p, b) for _, _, p, b in todo[n : 2 * n]] == [("bf16", 1)] * n
    assert {(p, b) for _, _, p, b in todo[2 * n : 3 * n]} == {("fp32", 64)}
    ids = [collect.config_id(s, p, b) for _, s, p, b in todo]
    assert len(ids) == len(set(ids))  # a configuration listed twice in PLAN runs once
    done = {collect.config_id(todo[0][1], "bf16", 64)}
    assert collect.plan(collect.MODELS, collect.PLAN, done)[0] == todo[1]
    held_out = {s for s, _, _ in collect.E2E}
    assert not held_out & {s for _, s in collect.MODELS}  # the end-to-end models are unseen


def test_clip_protocol_reports_each_stage_outside_the_timed_passes():
    """A terminal's progress line is told every warm-up and latency pass and the energy loop;
    the latency passes stay the configured count (the stage calls sit outside their timing)."""
    stages: list[str] = []
    cfg = InferConfig(model="x.py:net", precision="fp32", warmup=2, passes=3, sustained_s=0.05)
    res = infer_cost(nn.Linear(8, 8), torch.randn(2, 8), None, cfg, on_stage=stages.append)
    assert stages[:5] == [
        "warm-up pass 1/2",
        "warm-up pass 2/2",
        "latency pass 1/3",
        "latency pass 2/3",
        "latency pass 3/3",
    ]
    assert stages[5] == "energy loop of 0.05 s"
    assert all(re.fullmatch(r"energy loop \d+/0.05 s, \d+ passes", s) for s in stages[6:])
    assert res["latency_passes"] == 3 and res["window_passes"] >= 1


def test_an_unknown_model_is_refused_before_any_work():
    """Neither a video model nor a zoo spec: one line naming both kinds, before the CPU note."""
    from typer.testing import CliRunner

    from jouleprof.cli.main import app

    with pytest.raises(ValueError, match=r"unknown model 'hiera'.*hiera-b.*timm:NAME"):
        InferConfig(model="hiera")
    r = CliRunner().invoke(app, ["infer", "--model", "nope"])
    assert r.exit_code == 2  # the CLI's exit code for bad input
    assert "unknown model 'nope'" in r.output and "no CUDA device" not in r.output
