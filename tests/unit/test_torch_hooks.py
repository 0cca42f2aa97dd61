"""auto_phases on CPU: forward, backward, optimizer (and EMA, data, layers) per step, in order."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from jouleprof.clock import MonotonicClock  # noqa: E402
from jouleprof.integrations.torch_hooks import auto_phases  # noqa: E402
from jouleprof.timeline.recorder import PhaseRecorder  # noqa: E402


def _setup():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = PhaseRecorder(MonotonicClock(), device="cpu")
    return model, opt, rec


def _train_step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()


def _by_step(spans):
    out: dict[int, list] = {}
    for s in spans:
        out.setdefault(s.step, []).append(s)
    for v in out.values():
        v.sort(key=lambda s: s.t0_s)
    return out


def test_forward_backward_optimizer_per_step_in_order():
    model, opt, rec = _setup()
    x, y = torch.randn(4, 8), torch.randn(4, 2)
    handle = auto_phases(model, opt, rec)
    for _ in range(3):
        _train_step(model, opt, x, y)
    # Evaluation under no_grad between steps records nothing.
    with torch.no_grad():
        model(x)
    handle.remove()
    rec.close()
    steps = _by_step(rec.sink.spans)
    assert sorted(steps) == [0, 1, 2]
    for spans in steps.values():
        assert [s.phase for s in spans] == ["forward", "backward", "optimizer"]
        for a, b in zip(spans, spans[1:], strict=False):
            assert a.t1_s <= b.t0_s  # in order, no overlap
    assert handle.n_backward_fallbacks == 0  # the backward end came from autograd's engine


def test_remove_detaches_everything():
    model, opt, rec = _setup()
    x, y = torch.randn(4, 8), torch.randn(4, 2)
    handle = auto_phases(model, opt, rec)
    _train_step(model, opt, x, y)
    handle.remove()
    n = len(rec.sink.spans)
    for _ in range(2):
        _train_step(model, opt, x, y)
    rec.close()
    assert len(rec.sink.spans) == n == 3
    assert not model._forward_pre_hooks and not model._forward_hooks
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks
    handle.remove()  # twice is harmless


def test_gradient_accumulation_keeps_micro_batches_in_one_step():
    model, opt, rec = _setup()
    x, y = torch.randn(4, 8), torch.randn(4, 2)
    with auto_phases(model, opt, rec):
        for _ in range(2):
            opt.zero_grad()
            for _ in range(3):  # three micro-batches per optimizer step
                torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    rec.close()
    steps = _by_step(rec.sink.spans)
    assert sorted(steps) == [0, 1]
    for spans in steps.values():
        assert [s.phase for s in spans] == ["forward", "backward"] * 3 + ["optimizer"]


class _EMA:
    def __init__(self, model):
        self.shadow = [p.detach().clone() for p in model.parameters()]
        self.model = model
        self.calls = 0

    def update(self, decay=0.99):
        self.calls += 1
        with torch.no_grad():
            for s, p in zip(self.shadow, self.model.parameters(), strict=True):
                s.mul_(decay).add_(p, alpha=1 - decay)


def test_ema_data_and_layers():
    model, opt, rec = _setup()
    ema = _EMA(model)
    data = [(torch.randn(4, 8), torch.randn(4, 2)) for _ in range(3)]
    handle = auto_phases(model, opt, rec, ema=ema, layers=["0", "2"])
    for x, y in handle.data(data):
        _train_step(model, opt, x, y)
        ema.update(decay=0.9)
    handle.remove()
    rec.close()
    assert ema.calls == 3 and "update" not in ema.__dict__  # the method is restored
    steps = _by_step(rec.sink.spans)
    assert sorted(steps) == [0, 1, 2]
    for spans in steps.values():
        assert [s.phase for s in spans] == [
            "data",
            "forward",
            "forward/0",
            "forward/2",
            "backward",
            "optimizer",
            "ema",
        ]


def test_forward_that_raises_still_closes_its_phase():
    model, opt, rec = _setup()
    handle = auto_phases(model, opt, rec)
    with pytest.raises(RuntimeError):
        model(torch.randn(4, 3))  # wrong shape
    assert rec.open_phases == ()
    handle.remove()
    rec.close()
    assert [s.phase for s in rec.sink.spans] == ["forward"]


def test_bad_arguments():
    model, opt, rec = _setup()
    with pytest.raises(ValueError, match="step_on"):
        auto_phases(model, opt, rec, step_on="epoch")
    with pytest.raises(ValueError, match="no submodule"):
        auto_phases(model, opt, rec, layers=["nope"])
    with pytest.raises(TypeError, match="ema"):
        auto_phases(model, opt, rec, ema=object())
    # A refused call installs nothing.
    assert not model._forward_pre_hooks and not opt._optimizer_step_pre_hooks
