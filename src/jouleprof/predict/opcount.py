"""FLOPs of one ATen operator from the shapes of its arguments, by documented convention.

One FLOP is one floating-point add or multiply (a multiply-accumulate is 2). Conventions for what
FlopCounterMode leaves out (docs/predict-inference.md lists them):

- matmul, linear, conv: 2 per multiply-accumulate, plus 1 per output element for a bias.
- attention (scaled_dot_product_attention and its flash / efficient / cudnn variants):
  2·B·H·L·S·(E + Ev) for the two products, plus SOFTMAX_FLOPS + 1 (the scale) per score.
- softmax / log_softmax: SOFTMAX_FLOPS per element (max, subtract, exp, sum, divide).
- layer / group norm: NORM_FLOPS per element (mean, variance, normalize), + 2 with an affine;
  rms norm: 3 per element (+ 1 with a weight); batch norm in eval: 2 per element (+ 2 affine).
- pointwise: POINTWISE_FLOPS[op] per output element (1 for arithmetic, more for activations).
- reductions and pooling: 1 per element read (max pooling: 1 per window element).
- data movement (copies, casts, cat, pad, index): 0 FLOPs, bytes only.

Any other operator is *unsupported*: its FLOPs are counted as zero and the trace lists it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

SOFTMAX_FLOPS = 5
NORM_FLOPS = 5

MATMUL_OPS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addbmm", "mv", "dot", "einsum"}
CONV_OPS = {
    "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "cudnn_convolution",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "mkldnn_convolution",
}  # fmt: skip
ATTENTION_OPS = {
    "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math",
}  # fmt: skip
SOFTMAX_OPS = {"softmax", "_softmax", "log_softmax", "_log_softmax", "softmin"}
NORM_OPS = {"layer_norm", "native_layer_norm", "group_norm", "native_group_norm"}
RMS_OPS = {"rms_norm", "_fused_rms_norm"}
BATCHNORM_OPS = {
    "batch_norm", "_native_batch_norm_legit_no_training", "native_batch_norm",
    "_batch_norm_impl_index", "cudnn_batch_norm", "instance_norm", "_native_batch_norm_legit",
}  # fmt: skip
_ARITH = ("add sub mul div rsub neg abs relu relu_ clamp clamp_min clamp_max hardtanh where "
          "maximum minimum fill masked_fill threshold leaky_relu eq ne lt gt le ge sqrt rsqrt "
          "reciprocal square pow exp log floor ceil round sign addcmul addcdiv lerp")  # fmt: skip
_ACT4 = "sigmoid silu tanh hardswish hardsigmoid elu selu celu prelu erf"
POINTWISE_FLOPS = {
    **dict.fromkeys(_ARITH.split(), 1),  # noqa: SIM905
    **dict.fromkeys(_ACT4.split(), 4),  # noqa: SIM905
    **dict.fromkeys(("gelu", "mish", "softplus"), 8),
}
REDUCE_OPS = {
    "mean", "sum", "amax", "amin", "max", "min", "var", "std", "var_mean", "norm",
    "linalg_vector_norm", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "logsumexp", "cumsum", "argmax", "topk",
}  # fmt: skip
POOL_OPS = {
    "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "max_pool2d_with_indices", "max_pool3d_with_indices", "adaptive_max_pool2d",
}  # fmt: skip
MEMORY_OPS = {
    "_to_copy", "to", "copy", "copy_", "clone", "contiguous", "cat", "stack", "pad",
    "constant_pad_nd", "reflection_pad2d", "replicate_pad2d", "index", "index_select", "gather",
    "roll", "repeat", "flip", "zeros", "zeros_like", "ones", "ones_like", "empty", "empty_like",
    "full", "full_like", "new_zeros", "new_empty", "new_ones", "arange", "scatter", "index_put",
    "_unsafe_index", "masked_select", "tril", "triu", "fill_", "zero_", "lift_fresh", "bernoulli",
    "upsample_nearest2d", "upsample_bilinear2d", "_upsample_bilinear2d_aa", "pixel_shuffle",
    "channel_shuffle", "native_channel_shuffle", "split_with_sizes_copy", "_unsafe_view",
    "expand_copy", "linspace", "randn", "rand", "normal_", "uniform_", "dropout", "native_dropout",
    "feature_dropout", "alpha_dropout", "reshape", "flatten", "view", "permute", "transpose",
    "expand", "unfold",
    "split", "chunk", "unbind", "narrow", "select", "slice", "squeeze", "unsqueeze", "t",
    "as_strided", "unflatten", "movedim", "view_as", "reshape_as", "expand_as",
}  # fmt: skip
CATEGORIES = ("matmul", "conv", "attention", "softmax", "norm", "pointwise", "reduce", "memory",
              "other")  # fmt: skip


def _prod(xs: Sequence[int]) -> int:
    return math.prod(int(x) for x in xs)


def op_base(name: str) -> str:
    """The operator's base name: 'aten.addmm.default' -> 'addmm', 'relu_' -> 'relu_'."""
    parts = name.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] in ("aten", "prims", "prim") else parts[0]


def category(base: str) -> str:
    """The family an operator belongs to (one of CATEGORIES)."""
    b = base.rstrip("_") if base not in POINTWISE_FLOPS else base
    if base in MATMUL_OPS:
        return "matmul"
    if base in CONV_OPS:
        return "conv"
    if base in ATTENTION_OPS:
        return "attention"
    if base in SOFTMAX_OPS:
        return "softmax"
    if base in NORM_OPS or base in RMS_OPS or base in BATCHNORM_OPS:
        return "norm"
    if base in POINTWISE_FLOPS or b in POINTWISE_FLOPS:
        return "pointwise"
    if base in REDUCE_OPS or base in POOL_OPS:
        return "reduce"
    if base in MEMORY_OPS or b in MEMORY_OPS:
        return "memory"
    return "other"


def _matmul_flops(base: str, shapes: list[tuple[int, ...]], out: tuple[int, ...]) -> float:
    if base == "linear":
        x, w = shapes[0], shapes[1]
        k, n = w[-1], w[0] if len(w) == 2 else 1
        bias = _prod(x[:-1]) * n if len(shapes) > 2 and shapes[2] else 0
        return 2.0 * _prod(x[:-1]) * k * n + bias
    if base in ("addmm", "baddbmm", "addbmm"):
        k = shapes[1][-1]
        return 2.0 * _prod(out) * k + _prod(out)
    if base in ("mm", "bmm", "matmul", "mv", "dot"):
        a = shapes[0]
        k = a[-1]
        return 2.0 * max(_prod(out), 1) * k
    return 0.0  # einsum: listed as unsupported by the caller


def _conv_flops(base: str, shapes: list[tuple[int, ...]], out: tuple[int, ...], groups: int,
                transposed: bool) -> float:  # fmt: skip
    x, w = shapes[0], shapes[1]
    kernel = _prod(w[2:])
    has_bias = len(shapes) > 2 and bool(shapes[2])
    if transposed or base.startswith("conv_transpose"):
        # weight (Cin, Cout/groups, k...): every input element meets Cout/groups·k weights
        macs = _prod(x) * w[1] * kernel
    else:
        # weight (Cout, Cin/groups, k...): every output element sums Cin/groups·k products
        macs = _prod(out) * w[1] * kernel
    return 2.0 * macs + (_prod(out) if has_bias else 0)


def _attention_flops(shapes: list[tuple[int, ...]]) -> float:
    q, k, v = shapes[0], shapes[1], shapes[2]
    lead = _prod(q[:-2])
    scores = lead * q[-2] * k[-2]
    return 2.0 * scores * (q[-1] + v[-1]) + scores * (SOFTMAX_FLOPS + 1)


def op_flops(
    base: str,
    in_shapes: list[tuple[int, ...]],
    out_shape: tuple[int, ...],
    *,
    in_numel: int,
    groups: int = 1,
    transposed: bool = False,
    affine: bool = False,
    kernel_numel: int = 1,
) -> float | None:
    """FLOPs of one call by the module's conventions; None: no formula (unsupported operator).

    `in_shapes` are the shapes of the tensor arguments in order (an absent optional tensor is ());
    `out_shape` the first output's shape.
    """
    cat = category(base)
    n_out = _prod(out_shape) if out_shape else 0
    if cat == "matmul":
        return None if base == "einsum" else _matmul_flops(base, in_shapes, out_shape)
    if cat == "conv":
        return _conv_flops(base, in_shapes, out_shape, groups, transposed)
    if cat == "attention":
        return _attention_flops(in_shapes)
    if cat == "softmax":
        return float(SOFTMAX_FLOPS * n_out)
    if cat == "norm":
        if base in BATCHNORM_OPS:
            return float((2 + (2 if affine else 0)) * n_out)
        if base in RMS_OPS:
            return float((3 + (1 if affine else 0)) * n_out)
        return float((NORM_FLOPS + (2 if affine else 0)) * n_out)
    if cat == "pointwise":
        key = base if base in POINTWISE_FLOPS else base.rstrip("_")
        return float(POINTWISE_FLOPS[key] * n_out)
    if cat == "reduce":
        if base in POOL_OPS and not base.startswith("adaptive"):
            return float(n_out * kernel_numel)
        return float(in_numel)
    if cat == "memory":
        return 0.0
    return None
