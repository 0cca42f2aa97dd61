"""FakeTensor features match hand counts (opcount.py's documented conventions)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from jouleprof.predict.features import features_at, trace_model  # noqa: E402
from jouleprof.workloads.zoo import ZooModel, resolve  # noqa: E402


def zoo(factory, shape) -> ZooModel:
    return ZooModel("test:model", "file", "model", factory, shape)


class Attn(nn.Module):
    def forward(self, x):  # x (B, 2*5*4) -> q, k, v of (B, 2, 5, 4)
        q = x.view(x.shape[0], 2, 5, 4)
        return F.scaled_dot_product_attention(q, q, q)


class Sorter(nn.Module):
    def forward(self, x):
        return torch.sort(x, dim=-1).values


def test_linear_flops_bytes_launches():
    f = trace_model(zoo(lambda: nn.Linear(16, 8), (1, 1, 16)), 4, "fp32")
    (op,) = [o for o in f.ops if o.launches]
    # x (4,1,1,16) @ W(8,16)^T + b: 2*4*16*8 MACs-flops + 4*8 bias adds
    assert op.flops == 2 * 4 * 16 * 8 + 4 * 8
    assert op.bytes_read == (4 * 16 + 8 * 16 + 8) * 4
    assert op.bytes_written == 4 * 8 * 4
    assert f.launches == 1 and f.unsupported == {}


def test_conv_counts_bias_as_second_launch():
    f = trace_model(zoo(lambda: nn.Conv2d(3, 8, 3, padding=1), (3, 8, 8)), 2, "fp32")
    (op,) = f.ops
    out = 2 * 8 * 8 * 8
    assert op.flops == 2 * out * 3 * 9 + out
    assert op.bytes_read == (2 * 3 * 64 + 8 * 3 * 9 + 8) * 4
    assert op.bytes_written == out * 4
    assert op.launches == 2 and op.category == "conv"


def test_attention_products_and_softmax():
    f = trace_model(zoo(Attn, (1, 1, 40)), 1, "fp32")
    (op,) = f.ops  # the view costs nothing
    scores = 2 * 5 * 5
    assert op.category == "attention"
    assert op.flops == 2 * scores * (4 + 4) + scores * (5 + 1)
    assert op.bytes_read == 40 * 4  # q, k, v are one tensor: read once
    assert op.bytes_written == 40 * 4


def test_norms_softmax_pointwise():
    m = lambda: nn.Sequential(nn.LayerNorm(8), nn.Softmax(-1), nn.GELU())  # noqa: E731
    f = trace_model(zoo(m, (1, 3, 8)), 1, "fp32")
    ln, sm, ge = f.ops
    assert (ln.category, ln.flops) == ("norm", 24 * (5 + 2))
    assert ln.bytes_read == (24 + 8 + 8) * 4 and ln.bytes_written == 24 * 4
    assert (sm.category, sm.flops) == ("softmax", 24 * 5)
    assert (ge.category, ge.flops) == ("pointwise", 24 * 8)
    assert [lay.module for lay in f.layers] == ["0", "1", "2"]


def test_batchnorm_eval_and_relu():
    m = lambda: nn.Sequential(nn.BatchNorm2d(4), nn.ReLU())  # noqa: E731
    f = trace_model(zoo(m, (4, 2, 2)), 2, "fp32")
    bn, relu = f.ops
    assert bn.flops == 32 * (2 + 2) and relu.flops == 32


def test_bf16_follows_cuda_autocast():
    m = lambda: nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))  # noqa: E731
    f = trace_model(zoo(m, (1, 1, 8)), 2, "bf16")
    kinds = [(o.module, o.op, o.dtype) for o in f.ops]
    # autocast casts x, W, b to bf16 (3 copy kernels), the linear runs in bf16, and layer_norm is
    # on CUDA autocast's float32 list: its bf16 input is cast up first
    assert [k[1] for k in kinds].count("linear") == 1
    lin = next(o for o in f.ops if o.op == "linear")
    assert lin.dtype == "bfloat16" and lin.bytes_read == (2 * 8 + 64 + 8) * 2
    ln = next(o for o in f.ops if o.op == "layer_norm")
    assert ln.dtype == "float32"
    casts = [o for o in f.ops if o.category == "memory"]
    assert len(casts) == 4 and all(o.launches == 1 for o in casts)


def test_cached_weight_casts_leave_the_steady_pass():
    from jouleprof.predict.features import autocast_caches_weights

    m = lambda: nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))  # noqa: E731
    every = trace_model(zoo(m, (1, 1, 8)), 2, "bf16", cached_casts=False)
    once = trace_model(zoo(m, (1, 1, 8)), 2, "bf16", cached_casts=True)
    casts = lambda f: [o for o in f.ops if o.category == "memory"]  # noqa: E731
    # cached: W and b are cast once (in the warm-up); the input's cast and layer_norm's cast up
    # stay in every pass
    assert len(casts(every)) == 4 and len(casts(once)) == 2
    assert every.bytes_total - once.bytes_total == (64 + 8) * (4 + 2)
    default = trace_model(zoo(m, (1, 1, 8)), 2, "bf16")
    assert len(casts(default)) == (2 if autocast_caches_weights() else 4)


def test_unsupported_operator_is_listed_and_zero():
    f = trace_model(zoo(Sorter, (1, 1, 8)), 1, "fp32")
    assert f.unsupported == {"sort": 1}
    (op,) = f.ops
    assert op.flops == 0 and not op.supported and op.bytes_read == 32


def test_batch_scaling_matches_direct_trace():
    m = lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),  # noqa: E731
                              nn.Flatten(), nn.Linear(4 * 6 * 6, 5))  # fmt: skip
    z = zoo(m, (3, 8, 8))
    f1, f2, f5 = (trace_model(z, b, "bf16") for b in (1, 2, 5))
    types = {lay.module: lay.module_type for lay in f5.layers}
    g = features_at(f1, f2, 5, types)
    assert g.flops == pytest.approx(f5.flops)
    assert g.bytes_total == pytest.approx(f5.bytes_total)
    assert g.launches == f5.launches


def test_resolve_file_spec_and_errors(tmp_path):
    p = tmp_path / "net.py"
    p.write_text("import torch\ndef tiny():\n    return torch.nn.Linear(4, 2)\n"
                 "tiny.input_shape = (1, 1, 4)\n")  # fmt: skip
    z = resolve(f"{p}:tiny")
    assert z.input_shape == (1, 1, 4)
    assert trace_model(z, 3, "fp32").flops == 2 * 3 * 4 * 2 + 3 * 2
    with pytest.raises(ValueError, match="no callable 'nope'"):
        resolve(f"{p}:nope")
    with pytest.raises(ValueError, match="unknown source"):
        resolve("keras:resnet")
    with pytest.raises(ValueError, match="unknown torchvision"):
        resolve("torchvision:resnet9")
    with pytest.raises(ValueError, match="must look like"):
        resolve("resnet50")


def test_module_calls_split_into_those_that_launch_kernels():
    class Block(nn.Module):  # a container: launches nothing of its own
        def __init__(self):
            super().__init__()
            self.fc, self.skip, self.drop = nn.Linear(8, 8), nn.Identity(), nn.Dropout(0.1)

        def forward(self, x):
            return self.drop(self.skip(self.fc(x)))

    def model():
        return nn.Sequential(Block(), nn.ReLU(), Block())

    f = trace_model(zoo(model, (1, 1, 8)), 2, "fp32")
    # the root, 2 blocks × (block, fc, identity, dropout), relu
    assert f.module_calls == 10
    # only the two Linears and the ReLU run kernels (eval: dropout and identity do nothing)
    assert f.kernel_module_calls == 3
    # a batch from traces at 1 and 2 keeps the split
    g = features_at(trace_model(zoo(model, (1, 1, 8)), 1, "fp32"), f, 16, {})
    assert (g.module_calls, g.kernel_module_calls) == (10, 3)
