"""Features of a model's inference pass from one FakeTensor trace: no GPU, no weights.

Every ATen operator the pass dispatches is recorded with the module it ran in, its FLOPs
(opcount.py's conventions), the bytes it reads and writes (each distinct input tensor once, the
outputs), and the kernels it launches (0 for views and no-ops). Mixed precision follows CUDA
autocast: the trace runs under CPU autocast on fake tensors, and the operators CUDA autocast runs
in float32 (softmax, layer/group norm, sums, ...) get their half inputs cast up, cast kernels
included.

    feats = trace_model(zoo.resolve("timm:resnet50"), batch=64, precision="bf16")
    feats.flops, feats.bytes_total, feats.launches, feats.unsupported, feats.layers
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from jouleprof.predict import opcount

PRECISIONS = ("fp32", "bf16", "fp16")

# Operators CUDA autocast runs in float32 (torch.amp docs, "CUDA Ops that can autocast to float32").
_CUDA_FP32_OPS = {
    "softmax", "_softmax", "log_softmax", "_log_softmax", "layer_norm", "native_layer_norm",
    "group_norm", "native_group_norm", "norm", "linalg_vector_norm", "sum", "cumsum", "prod",
    "pow", "rsqrt", "exp", "log", "softplus", "reciprocal",
}  # fmt: skip
_NO_KERNEL = {
    "empty", "empty_like", "new_empty", "empty_strided", "lift_fresh", "detach", "alias",
    "_local_scalar_dense", "sym_size", "sym_stride", "sym_numel", "device",
}  # fmt: skip


@dataclass(frozen=True)
class OpRecord:
    """One operator call of the traced pass."""

    module: str
    """Path of the innermost module running it ("" the model itself)."""
    op: str
    """ATen base name, e.g. "addmm"."""
    category: str
    """One of opcount.CATEGORIES."""
    dtype: str
    """Dtype of its first floating input ("" none)."""
    flops: float
    bytes_read: float
    bytes_written: float
    launches: int
    """Kernels it launches (0 for a view)."""
    supported: bool
    """False: no FLOP formula; its FLOPs are counted as zero (bytes and launches still counted)."""


@dataclass(frozen=True)
class LayerFeatures:
    """The operators one module runs itself (not in its children), summed over its calls."""

    module: str
    module_type: str
    flops: float
    bytes_read: float
    bytes_written: float
    launches: int
    flops_by_category: dict[str, float]
    bytes_by_category: dict[str, float]
    main_category: str
    """The category with the most bytes + FLOPs-equivalent work (the layer's kind)."""
    dtype: str
    unsupported: tuple[str, ...] = ()

    @property
    def bytes_total(self) -> float:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved (0 when nothing moves)."""
        return self.flops / self.bytes_total if self.bytes_total else 0.0


@dataclass(frozen=True)
class ModelFeatures:
    """The whole traced pass."""

    spec: str
    batch: int
    precision: str
    input_shape: tuple[int, ...]
    params: int
    module_calls: int
    ops: tuple[OpRecord, ...] = field(repr=False)
    layers: tuple[LayerFeatures, ...] = field(repr=False)
    kernel_module_calls: int = -1
    """Calls of modules that launch kernels of their own (the innermost module running when
    the kernel launches); the rest of module_calls launch none. -1: not counted."""

    @property
    def flops(self) -> float:
        return sum(o.flops for o in self.ops)

    @property
    def bytes_total(self) -> float:
        return sum(o.bytes_read + o.bytes_written for o in self.ops)

    @property
    def launches(self) -> int:
        return sum(o.launches for o in self.ops)

    @property
    def unsupported(self) -> dict[str, int]:
        """Operators without a FLOP formula (counted as zero FLOPs) -> number of calls."""
        return dict(Counter(o.op for o in self.ops if not o.supported))

    def flops_by_category(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for o in self.ops:
            out[o.category] += o.flops
        return dict(out)


def _tensors(x: Any) -> list:
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, list | tuple):
        return [t for item in x for t in _tensors(item)]
    return []


def _nbytes(t) -> int:
    n = t.numel() * t.element_size()
    try:
        return min(n, t.untyped_storage().nbytes())  # an expanded tensor reads its storage once
    except Exception:  # noqa: BLE001 - a tensor without storage (sparse, nested): its logical size
        return n


class _Counter:
    """A TorchDispatchMode (built lazily: torch is imported only inside trace_model)."""

    def __init__(self, stack: list[str], precision: str, cached: set | None = None):
        self.stack = stack
        self.precision = precision
        self.ops: list[OpRecord] = []
        self.cached = cached or set()
        """Storages of the weights whose half-precision copies autocast reuses across passes:
        their casts are not kernels of a steady pass."""

    def record(self, func, args, kwargs, out) -> None:
        import torch
        from torch.multiprocessing.reductions import StorageWeakRef

        base = opcount.op_base(str(func.name()) if hasattr(func, "name") else str(func))
        base = base.split("::")[-1]
        ins = [t for t in _tensors(list(args) + list(kwargs.values()))]
        outs = _tensors(out)
        module = self.stack[-1] if self.stack else ""
        floats = [t for t in ins if t.is_floating_point()]
        dtype = str(floats[0].dtype).replace("torch.", "") if floats else ""
        if not outs or base in _NO_KERNEL:
            return
        schema = getattr(func, "_schema", None)
        mutable = bool(schema is not None and schema.is_mutable)
        in_refs = {StorageWeakRef(t.untyped_storage()) for t in ins}
        aliased = all(StorageWeakRef(t.untyped_storage()) in in_refs for t in outs)
        if aliased and not mutable:
            return  # a view, or a no-op returning its input (dropout in eval, .to(same dtype))
        if (base in ("to", "_to_copy") and len(ins) == 1
                and StorageWeakRef(ins[0].untyped_storage()) in self.cached):  # fmt: skip
            return  # a weight's cast that autocast caches: done once, in the warm-up
        seen: set[int] = set()
        read = 0
        for t in ins:
            if id(t) not in seen:
                seen.add(id(t))
                read += _nbytes(t)
        written = sum(t.numel() * t.element_size() for t in outs)
        if base in ("zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "fill_",
                    "zero_", "new_zeros", "new_ones", "arange"):  # fmt: skip
            read = 0
        in_shapes = [tuple(a.shape) if isinstance(a, torch.Tensor) else () for a in args]
        groups = int(args[8]) if base == "convolution" and len(args) > 8 else 1
        if base in ("conv1d", "conv2d", "conv3d") and len(args) > 6:
            groups = int(args[6])
        transposed = bool(args[6]) if base == "convolution" and len(args) > 6 else False
        kernel = args[1] if base.startswith(("max_pool", "avg_pool")) and len(args) > 1 else [1]
        affine = _affine(base, args)
        flops = opcount.op_flops(
            base,
            in_shapes,
            tuple(outs[0].shape),
            in_numel=sum(t.numel() for t in ins[:1]),
            groups=groups,
            transposed=transposed,
            affine=affine,
            kernel_numel=opcount._prod(kernel if isinstance(kernel, list | tuple) else [kernel]),
        )
        launches = 1
        if opcount.category(base) == "conv" and len(in_shapes) > 2 and in_shapes[2]:
            launches = 2  # cuDNN convolution, then the bias add
        self.ops.append(
            OpRecord(
                module,
                base,
                opcount.category(base),
                dtype,
                float(flops or 0.0),
                float(read),
                float(written),
                launches,
                flops is not None,
            )  # fmt: skip
        )

    def cast_up(self, func, args, kwargs):
        """CUDA autocast's float32 policy: half inputs of a float32-list op are cast up first."""
        import torch

        base = opcount.op_base(str(func.name())).split("::")[-1]
        if self.precision == "fp32" or base not in _CUDA_FP32_OPS:
            return args, kwargs
        module = self.stack[-1] if self.stack else ""

        def up(a):
            if isinstance(a, torch.Tensor) and a.dtype in (torch.bfloat16, torch.float16):
                n = a.numel()
                self.ops.append(
                    OpRecord(
                        module,
                        "_to_copy",
                        "memory",
                        str(a.dtype).replace("torch.", ""),
                        0.0,
                        2.0 * n,
                        4.0 * n,
                        1,
                        True,
                    )  # fmt: skip
                )
                return a.to(torch.float32)
            return a

        return tuple(up(a) for a in args), {k: up(v) for k, v in kwargs.items()}


def _affine(base: str, args) -> bool:
    import torch

    if base in ("layer_norm", "native_layer_norm"):
        return len(args) > 2 and isinstance(args[2], torch.Tensor)
    if base in ("group_norm", "native_group_norm"):
        return len(args) > 2 and isinstance(args[2], torch.Tensor)
    if base in opcount.BATCHNORM_OPS or base in opcount.RMS_OPS:
        return len(args) > 1 and isinstance(args[1], torch.Tensor)
    return False


def _make_mode(counter: _Counter):
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            args, kwargs = counter.cast_up(func, args, kwargs)
            out = func(*args, **kwargs)
            counter.record(func, args, kwargs, out)
            return out

    return _Mode()


def _fake_model(factory, fake_mode):
    """Build the model with its parameters as fake CPU tensors (meta first: no memory, no init)."""
    import torch

    try:
        with torch.device("meta"):
            model = factory()
    except Exception:  # noqa: BLE001 - some models compute in __init__ (.item()): build for real
        model = factory()
    model.eval()
    with fake_mode:
        for mod in model.modules():
            for n, p in list(mod._parameters.items()):
                if p is not None:
                    t = torch.empty(p.shape, dtype=p.dtype, device="cpu")
                    mod._parameters[n] = torch.nn.Parameter(t, requires_grad=False)
            for n, b in list(mod._buffers.items()):
                if b is not None:
                    mod._buffers[n] = torch.empty(b.shape, dtype=b.dtype, device="cpu")
    return model


def autocast_cast_counts(device: str = "cpu", passes: int = 3) -> list[int]:
    """Cast operators each of `passes` bf16 passes of a small MLP dispatches inside one
    `inference_context` (the steady loop's): equal counts mean autocast casts the weights again
    every pass, a drop after the first that it reuses them."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from jouleprof.bench.infer_loop import inference_context

    class Casts(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if opcount.op_base(str(func.name())).split("::")[-1] in ("to", "_to_copy"):
                Casts.n += 1
            return func(*args, **(kwargs or {}))

    net = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(3)]).to(device).eval()
    x = torch.randn(2, 16, device=device)
    counts = []
    with inference_context("bf16", device):
        for _ in range(passes):
            Casts.n = 0
            with Casts():
                net(x)
            counts.append(Casts.n)
    return counts


@functools.cache
def autocast_caches_weights() -> bool:
    """Whether this torch's autocast reuses a weight's half-precision copy from one pass to the
    next in the steady loop. PyTorch caches the casts of leaf weights that require grad, but not
    under inference_mode in versions with that fix; probed once on the CPU (its autocast shares
    the caching code with CUDA's)."""
    counts = autocast_cast_counts("cpu", 2)
    return counts[1] < counts[0]


def trace_model(zoo_model, batch: int, precision: str,
                cached_casts: bool | None = None) -> ModelFeatures:  # fmt: skip
    """Trace one inference pass of `zoo_model` (a `workloads.zoo.ZooModel`) on fake tensors.

    `cached_casts`: whether a steady pass skips the weights' casts to half precision (autocast
    reuses them); None: as this torch does (`autocast_caches_weights`)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if int(batch) < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from jouleprof.predict.scopes import module_names, module_scopes

    fake_mode = FakeTensorMode(allow_non_fake_inputs=False)
    try:
        model = _fake_model(zoo_model.factory, fake_mode)
    except Exception as e:  # noqa: BLE001
        msg = f"{zoo_model.spec}: could not build the model: {type(e).__name__}: {e}"
        raise ValueError(msg) from e
    names = module_names(model)
    params = sum(p.numel() for p in model.parameters())
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if cached_casts is None:
        cached_casts = dtype is not None and autocast_caches_weights()
    cached = set()
    if cached_casts and dtype is not None:
        from torch.multiprocessing.reductions import StorageWeakRef

        cached = {StorageWeakRef(p.untyped_storage()) for p in model.parameters()
                  if p.dtype == torch.float32}  # fmt: skip
    calls = [0]
    by_path: dict[str, int] = {}  # module path -> calls
    with fake_mode:
        x = torch.empty((int(batch), *zoo_model.input_shape), dtype=torch.float32)

        def enter(path: str) -> None:
            calls[0] += 1
            by_path[path] = by_path.get(path, 0) + 1

        with module_scopes(model, on_enter=enter) as stack:
            counter = _Counter(stack, precision, cached)
            ac = torch.autocast("cpu", dtype=dtype, enabled=dtype is not None)
            try:
                with torch.inference_mode(), ac, _make_mode(counter):
                    model(x)
            except Exception as e:  # noqa: BLE001
                raise ValueError(
                    f"{zoo_model.spec}: the FakeTensor trace failed ({type(e).__name__}: {e}); "
                    "a model that needs real data (data-dependent shapes) cannot be predicted"
                ) from e
    types = {path: cls for path, cls in names.values()}
    return ModelFeatures(
        spec=zoo_model.spec,
        batch=int(batch),
        precision=precision,
        input_shape=tuple(zoo_model.input_shape),
        params=int(params),
        module_calls=calls[0],
        ops=tuple(counter.ops),
        layers=tuple(aggregate_layers(counter.ops, types)),
        kernel_module_calls=kernel_module_calls(counter.ops, by_path),
    )


def kernel_module_calls(ops, calls_by_module: dict[str, int]) -> int:
    """Calls of the modules that launch a kernel of their own in `ops` (each op is charged to
    the innermost module running), from each module's call count."""
    own = {o.module for o in ops if o.launches}
    return int(sum(c for m, c in calls_by_module.items() if m in own))


def aggregate_layers(ops, types: dict[str, str]) -> list[LayerFeatures]:
    """Sum operator records per module, in order of first appearance."""
    groups: dict[str, list[OpRecord]] = {}
    for o in ops:
        groups.setdefault(o.module, []).append(o)
    out = []
    for path, items in groups.items():
        fl: dict[str, float] = defaultdict(float)
        by: dict[str, float] = defaultdict(float)
        for o in items:
            fl[o.category] += o.flops
            by[o.category] += o.bytes_read + o.bytes_written
        # a FLOP weighs ~1/200 of a byte at the H200's balance point (790e12 / 4.3e12 ≈ 184)
        main = max(by, key=lambda c: by[c] + fl[c] / 184.0) if by else "other"
        dts = Counter(o.dtype for o in items if o.dtype)
        out.append(
            LayerFeatures(
                module=path,
                module_type=types.get(path, ""),
                flops=sum(o.flops for o in items),
                bytes_read=sum(o.bytes_read for o in items),
                bytes_written=sum(o.bytes_written for o in items),
                launches=sum(o.launches for o in items),
                flops_by_category=dict(fl),
                bytes_by_category=dict(by),
                main_category=main,
                dtype=dts.most_common(1)[0][0] if dts else "",
                unsupported=tuple(sorted({o.op for o in items if not o.supported})),
            )
        )
    return out


def _scale_ops(ops1, ops2, batch: int) -> list[OpRecord] | None:
    """Operator records at `batch` from the traces at batch 1 and 2 (every count here is affine
    in the batch for a model without batch-dependent control flow); None if the traces differ."""
    if len(ops1) != len(ops2):
        return None
    out = []
    k = batch - 1
    for a, b in zip(ops1, ops2, strict=True):
        if (a.module, a.op, a.launches) != (b.module, b.op, b.launches):
            return None
        out.append(
            OpRecord(
                a.module,
                a.op,
                a.category,
                a.dtype,
                max(0.0, a.flops + k * (b.flops - a.flops)),
                max(0.0, a.bytes_read + k * (b.bytes_read - a.bytes_read)),
                max(0.0, a.bytes_written + k * (b.bytes_written - a.bytes_written)),
                a.launches,
                a.supported,
            )  # fmt: skip
        )
    return out


def features_at(f1: ModelFeatures, f2: ModelFeatures, batch: int, types: dict[str, str]):
    """ModelFeatures at `batch` from traces at batch 1 and 2; None where they are not affine."""
    ops = _scale_ops(f1.ops, f2.ops, int(batch))
    if ops is None:
        return None
    return ModelFeatures(
        f1.spec, int(batch), f1.precision, f1.input_shape, f1.params, f1.module_calls,
        tuple(ops), tuple(aggregate_layers(ops, types)), f1.kernel_module_calls,
    )  # fmt: skip


def ops_table(feats: ModelFeatures):
    """The operator records as a DataFrame (one row per call) with the trace's coordinates."""
    import pandas as pd

    df = pd.DataFrame([o.__dict__ for o in feats.ops])
    df.insert(0, "spec", feats.spec)
    df.insert(1, "precision", feats.precision)
    df.insert(2, "batch", feats.batch)
    return df
