"""The reference loops of benchmarks/ref_loops.py: each a training (or inference) loop as a user
would write it, and a replica of its step made of phase calls, for the references.

A loop gives `cycle()`: its steps, each a list of (phase, call) in order (a loop with gradient
accumulation has several steps per cycle, the optimizer in the last one). `call(again)` runs the
phase once; `again=True` says the same phase runs once more right after, on the same inputs (a
backward then keeps its graph, an optimizer step keeps the gradients). The fine measurement
runs the loop through its own code path (the user's loop with `PhaseRecorder`, or the
framework's trainer with jouleprof's callback); the references replay `cycle()`.

Loops:
- user4: the issue's own loop: a bf16 GEMM burst (~29 ms), a memory-bound copy (1 GiB x n,
  ~15 ms), a one-thread spin kernel (~6 ms), 600 tiny kernels (~1 ms); sized by time.
- hf_bert: Hugging Face Trainer, BERT-base masked LM from a local config (random init),
  batch 64 x 128, bf16; phases forward/backward/optimizer through `trainer_callback`.
- pl_resnet50: Lightning + timm ResNet-50 (random init), batch 128, bf16-mixed, a data-bound
  step: the loader sleeps (a CPU-side decode) longer than the GPU's step, so the GPU idles.
  Lightning's teardown moves the model to the CPU after `trainer.fit`; `restore_placement()`
  puts it back before the references replay it.
- vit_accum (held out): timm ViT-B/16, micro-batch 32, gradient accumulation of 4, the optimizer
  in every 4th step; phases data/forward/backward/optimizer.
- infer_mixed (held out): an inference + loss loop: an fp32 embedding MLP, a bf16 encoder, an
  fp32 loss over a vocabulary, and a host-side logging phase (a sync, a string, a 2 ms sleep).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

Call = Callable[[bool], None]
MIN_STEPS = 5
"""The framework loops run at least this many steps, whatever the time (a slow first step)."""


class Loop:
    """A reference loop. Subclasses set `name`, `framework`, build state in `build()`."""

    name = "loop"
    framework = "own"
    replayable: tuple[str, ...] = ()
    """Phases that may run twice in a step with no effect but their cost (`<loop>_repeat`)."""
    removable: tuple[str, ...] = ()
    """Phases the step can run without, the others unchanged (none takes its input from them):
    each gets a third reference, `removed:X`, the step less the step without X, priced at the
    step's own pace and with X's effect on its neighbours (benchmarks/ref_loops.py)."""
    removable_groups: tuple[str, ...] = ()
    """Groups of removable phases ("a+b") the step also runs without, all at once: the pair's
    own third reference, `removed:a+b`, for the row that weighs them together (`--joint a+b`);
    where the phases share energy, the members' own `removed` references count it once each."""

    def __init__(self, device: str, smoke: bool) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.smoke = smoke
        self.info: dict[str, Any] = {}

    # -- to override ------------------------------------------------------------------------

    def build(self) -> None:
        """Make models, data and optimizers."""

    def calibrate(self) -> None:
        """Size the phases by time (after build, before timing)."""

    def cycle(self) -> list[list[tuple[str, Call]]]:
        raise NotImplementedError

    def reset(self) -> None:
        """Bring the state back to a step's start (gradients cleared)."""

    def run_fine(self, rec: Any, seconds: float, replayable: tuple[str, ...] = ()) -> int:
        """The measured run: the user's loop with the recorder, for `seconds`. Steps run.
        The phases named in `replayable` run through `rec.replay` (twice in the steps that the
        recorder's `RepeatConfig` draws, each run its own span)."""
        steps = self.cycle()
        t_end = time.perf_counter() + seconds
        n = 0
        while time.perf_counter() < t_end:
            for phases in steps:
                with rec.step():
                    for name, call in phases:
                        if name in replayable:
                            rec.replay(name, call, False)
                            continue
                        with rec.phase(name):
                            call(False)
                n += 1
        return n

    # -- shared -----------------------------------------------------------------------------

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def autocast(self, enabled: bool = True):
        dtype = self.torch.bfloat16
        return self.torch.autocast(self.device.type, dtype=dtype, enabled=enabled)

    def close(self) -> None:
        for k in list(vars(self)):
            if k not in ("torch", "device", "cuda", "smoke", "info", "name"):
                setattr(self, k, None)


def time_ms(loop: Loop, fn: Callable[[], None], n: int = 5) -> float:
    """Mean milliseconds of `fn` (CUDA events on a GPU, the host clock on a CPU)."""
    torch = loop.torch
    fn()
    loop.sync()
    if loop.cuda:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(n):
            fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / n
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return 1e3 * (time.perf_counter() - t0) / n


def time_once_ms(loop: Loop, fn: Callable[[], None]) -> tuple[float, float]:
    """(device ms, host ms) of one call of `fn`, the device idle before it: its time on the
    device (CUDA events; the host clock on a CPU) and the host's time to issue it."""
    torch = loop.torch
    loop.sync()
    if loop.cuda:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        t0 = time.perf_counter()
        fn()
        host_ms = 1e3 * (time.perf_counter() - t0)
        b.record()
        b.synchronize()
        return a.elapsed_time(b), host_ms
    t0 = time.perf_counter()
    fn()
    ms = 1e3 * (time.perf_counter() - t0)
    return ms, ms


class User4(Loop):
    """The issue's 4-phase loop: GEMM burst, copy, one-thread spin, tiny kernels."""

    name = "user4"
    target_ms = {"gemm": 29.0, "copy": 15.0, "spin": 6.0}
    replayable = ("copy",)  # idempotent kernels; the copy is what repetition is tried on
    removable = ("gemm", "copy", "spin", "tiny")  # no phase reads another's output
    removable_groups = ("gemm+copy",)  # the two that share energy (ref_loops/joint_rows)

    def build(self) -> None:
        torch = self.torch
        n = 128 if self.smoke else 8192
        dtype = torch.bfloat16 if self.cuda else torch.float32  # bf16 is slow on a CPU
        self.a = torch.randn(n, n, device=self.device, dtype=dtype)
        self.b = torch.randn(n, n, device=self.device, dtype=dtype)
        self.c = torch.empty(n, n, device=self.device, dtype=dtype)
        nbytes = (1 << 20) if self.smoke else (1 << 30)
        self.src = torch.ones(nbytes // 4, device=self.device, dtype=torch.float32)
        self.dst = torch.empty_like(self.src)
        self.tiny = torch.zeros(8, device=self.device)
        self.n_gemm, self.n_copy, self.spin_cycles, self.n_tiny = 1, 1, 1, 60 if self.smoke else 600

    def calibrate(self) -> None:
        torch = self.torch
        gemm_ms = time_ms(self, lambda: torch.mm(self.a, self.b, out=self.c), 10)
        copy_ms = time_ms(self, lambda: self.dst.copy_(self.src), 10)
        scale = 0.1 if self.smoke else 1.0
        self.n_gemm = max(1, round(scale * self.target_ms["gemm"] / gemm_ms))
        self.n_copy = max(1, round(scale * self.target_ms["copy"] / copy_ms))
        if self.cuda:
            ms = time_ms(self, lambda: torch.cuda._sleep(1_000_000), 3)
            self.spin_cycles = max(1, round(1_000_000 * self.target_ms["spin"] / ms))
        else:
            self.spin_cycles = 0.6e-3  # seconds of a host busy-wait (no spin kernel on a CPU)
        self.info.update(
            gemm_ms_each=gemm_ms,
            copy_ms_each=copy_ms,
            n_gemm=self.n_gemm,
            n_copy=self.n_copy,
            spin_cycles=self.spin_cycles,
            n_tiny=self.n_tiny,
        )

    def _gemm(self, again: bool) -> None:
        for _ in range(self.n_gemm):
            self.torch.mm(self.a, self.b, out=self.c)

    def _copy(self, again: bool) -> None:
        for _ in range(self.n_copy):
            self.dst.copy_(self.src)

    def _spin(self, again: bool) -> None:
        if self.cuda:
            self.torch.cuda._sleep(self.spin_cycles)
        else:
            t_end = time.perf_counter() + self.spin_cycles
            while time.perf_counter() < t_end:
                pass

    def _tiny(self, again: bool) -> None:
        for _ in range(self.n_tiny):
            self.tiny.add_(1.0)

    def cycle(self):
        return [[("gemm", self._gemm), ("copy", self._copy), ("spin", self._spin),
                 ("tiny", self._tiny)]]  # fmt: skip


class _Trainable(Loop):
    """Shared by the training loops: data/forward/backward/optimizer calls on self.model."""

    def _forward(self, again: bool) -> None:
        with self.autocast(self.amp):
            self.loss = self.loss_fn()

    def _backward(self, again: bool) -> None:
        self.loss.backward(retain_graph=again)

    def _optimizer(self, again: bool) -> None:
        self.opt.step()
        if not again:
            self.opt.zero_grad(set_to_none=True)

    def reset(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        self.loss = None


class HfBert(_Trainable):
    """Hugging Face Trainer, BERT-base masked LM, random init from a local config."""

    name = "hf_bert"
    framework = "transformers.Trainer"

    def build(self) -> None:
        import transformers

        torch = self.torch
        if self.smoke:
            cfg = transformers.BertConfig(
                vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=32,
            )  # fmt: skip
            self.batch, self.seq = 4, 16
        else:
            cfg = transformers.BertConfig()  # bert-base: 12 layers, 768 wide, vocab 30522
            self.batch, self.seq = 64, 128
        self.amp = self.cuda
        self.model = transformers.BertForMaskedLM(cfg).to(self.device)
        g = torch.Generator().manual_seed(0)
        n = self.batch * 8
        ids = torch.randint(0, cfg.vocab_size, (n, self.seq), generator=g)
        labels = torch.where(torch.rand(n, self.seq, generator=g) < 0.15, ids, -100)
        self.rows = [
            {"input_ids": ids[i], "attention_mask": torch.ones(self.seq, dtype=torch.long),
             "labels": labels[i]}
            for i in range(n)
        ]  # fmt: skip
        self.x = {k: torch.stack([r[k] for r in self.rows[: self.batch]]).to(self.device)
                  for k in self.rows[0]}  # fmt: skip
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=self.cuda or None)
        self.info.update(batch=self.batch, seq=self.seq, transformers=transformers.__version__)

    def loss_fn(self):
        return self.model(**self.x).loss

    def cycle(self):
        return [[("forward", self._forward), ("backward", self._backward),
                 ("optimizer", self._optimizer)]]  # fmt: skip

    def run_fine(self, rec: Any, seconds: float) -> int:
        import tempfile

        import transformers

        from jouleprof.integrations.hf_trainer import trainer_callback

        rows = self.rows

        class Data(self.torch.utils.data.Dataset):
            def __len__(self):
                return len(rows)

            def __getitem__(self, i):
                return rows[i]

        class Stop(transformers.TrainerCallback):
            t_end = math.inf

            def on_train_begin(self, args, state, control, **kw):
                self.t_end = time.perf_counter() + seconds

            def on_step_end(self, args, state, control, **kw):
                if time.perf_counter() > self.t_end and state.global_step >= MIN_STEPS:
                    control.should_training_stop = True

        with tempfile.TemporaryDirectory() as tmp:
            args = transformers.TrainingArguments(
                output_dir=tmp, per_device_train_batch_size=self.batch, max_steps=10**7,
                learning_rate=1e-4, bf16=self.cuda, use_cpu=not self.cuda,
                optim="adamw_torch_fused" if self.cuda else "adamw_torch",
                logging_strategy="no", save_strategy="no", report_to="none", disable_tqdm=True,
                dataloader_num_workers=0, dataloader_drop_last=True, seed=0,
            )  # fmt: skip
            trainer = transformers.Trainer(
                model=self.model, args=args, train_dataset=Data(),
                callbacks=[trainer_callback(rec), Stop()],
            )  # fmt: skip
            out = trainer.train()
        self.info["trainer_steps"] = int(out.global_step)
        return int(out.global_step)


def _check_placement(model, device, opt=None) -> None:
    """Raise unless every parameter and buffer of `model` is on `device`, floating ones fp32,
    and `opt` (if given) steps exactly the model's parameters."""
    import torch

    bad = [
        f"{n} ({t.device}, {t.dtype})"
        for n, t in [*model.named_parameters(), *model.named_buffers()]
        if t.device.type != device.type or (t.is_floating_point() and t.dtype != torch.float32)
    ]
    if bad:
        raise RuntimeError(f"model not on {device} in fp32: {', '.join(bad[:3])} ...")
    if opt is not None:
        held = {id(p) for g in opt.param_groups for p in g["params"]}
        if held != {id(p) for p in model.parameters()}:
            raise RuntimeError("the optimizer does not hold the model's parameters")


class PlResNet50(_Trainable):
    """Lightning + timm ResNet-50, a data-bound step (the loader sleeps past the GPU's step)."""

    name = "pl_resnet50"
    framework = "lightning"
    idle_ms = 34.0

    def build(self) -> None:
        import timm

        torch = self.torch
        self.batch, self.px = (2, 32) if self.smoke else (128, 224)
        self.amp = self.cuda
        arch = "resnet10t" if self.smoke else "resnet50"  # smoke: the code path, not the model
        self.model = timm.create_model(arch, pretrained=False, num_classes=1000)
        self.model = self.model.to(self.device, memory_format=torch.channels_last)
        g = torch.Generator().manual_seed(0)
        self.x_u8 = torch.randint(0, 256, (self.batch, 3, self.px, self.px), dtype=torch.uint8,
                                  generator=g)  # fmt: skip
        self.y = torch.randint(0, 1000, (self.batch,), generator=g)
        if self.cuda:
            self.x_u8 = self.x_u8.pin_memory()
        self.xg = self.x_u8.to(self.device)
        self.yg = self.y.to(self.device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.data_s = 0.0
        self.info.update(batch=self.batch, px=self.px, timm=timm.__version__)

    def _prep(self, x):
        x = x.float().div_(255.0).sub_(0.45).div_(0.225)
        return x.contiguous(memory_format=self.torch.channels_last)

    def loss_fn(self):
        import torch.nn.functional as F  # noqa: N812

        return F.cross_entropy(self.model(self._prep(self.xg)), self.yg)

    def cycle(self):
        return [[("forward", self._forward), ("backward", self._backward),
                 ("optimizer", self._optimizer)]]  # fmt: skip

    def calibrate(self) -> None:
        def step():
            for _, call in self.cycle()[0]:
                call(False)

        step_ms = time_ms(self, step, 5)
        self.data_s = (step_ms + (3.0 if self.smoke else self.idle_ms)) / 1e3
        self.info.update(replica_step_ms=step_ms, loader_sleep_ms=1e3 * self.data_s)

    def run_fine(self, rec: Any, seconds: float) -> int:
        try:
            import lightning.pytorch as pl
        except ImportError:
            import pytorch_lightning as pl  # raises ImportError with its name when missing

        from jouleprof.integrations.lightning import lightning_callback

        loop, torch = self, self.torch

        class Loader(torch.utils.data.IterableDataset):
            def __iter__(self):
                while True:
                    time.sleep(loop.data_s)  # a CPU-side decode, longer than the GPU's step
                    yield loop.x_u8, loop.y

        class Module(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = loop.model

            def training_step(self, batch, idx):
                import torch.nn.functional as F  # noqa: N812

                x, y = batch
                return F.cross_entropy(self.net(loop._prep(x)), y)

            def configure_optimizers(self):
                return torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.9)

        class Stop(pl.Callback):
            t_end = math.inf

            def on_train_start(self, trainer, *args):
                self.t_end = time.perf_counter() + seconds

            def on_train_batch_end(self, trainer, *args):
                if time.perf_counter() > self.t_end and trainer.global_step >= MIN_STEPS:
                    trainer.should_stop = True

        dl = torch.utils.data.DataLoader(Loader(), batch_size=None, num_workers=0,
                                         pin_memory=self.cuda)  # fmt: skip
        trainer = pl.Trainer(
            accelerator="gpu" if self.cuda else "cpu", devices=1,
            precision="bf16-mixed" if self.cuda else "32-true", max_steps=10**7,
            logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
            callbacks=[lightning_callback(rec), Stop()],
        )  # fmt: skip
        trainer.fit(Module(), train_dataloaders=dl)
        self.info["lightning"] = pl.__version__
        self.restore_placement()
        return int(trainer.global_step)

    def restore_placement(self) -> None:
        """Put the model back where `build()` put it. Lightning's `Strategy.teardown()` ends
        `trainer.fit` with `lightning_module.cpu()`, so after the fine run the model (whose
        parameters the replay's optimizer holds) sat on the CPU in fp32 while the replay fed it
        the GPU batch under autocast: "Input type (CUDABFloat16Type) and weight type
        (torch.FloatTensor) should be the same". `Module.to` keeps the parameter objects, so
        `self.opt` still steps the model's parameters."""
        torch = self.torch
        self.model.to(self.device, dtype=torch.float32, memory_format=torch.channels_last)
        _check_placement(self.model, self.device, self.opt)


class VitAccum(_Trainable):
    """Held out: timm ViT-B/16, gradient accumulation of 4, the optimizer every 4th step."""

    name = "vit_accum"
    accum = 4
    replayable = ("data", "forward")
    """The copy in and the forward under autograd (its graph and loss overwritten by the second
    run, dropout off): `vit_accum_repeat` pins the forward through the counter, beside the
    backward whose estimate is over on both cards (benchmarks/results/ref_loops, H100)."""

    def build(self) -> None:
        import timm

        torch = self.torch
        if self.smoke:
            self.model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32)
            self.batch, self.px = 2, 32
        else:
            self.model = timm.create_model("vit_base_patch16_224", pretrained=False)
            self.batch, self.px = 32, 224
        self.model = self.model.to(self.device)
        self.amp = self.cuda
        g = torch.Generator().manual_seed(0)
        self.x_cpu = torch.randn(self.batch, 3, self.px, self.px, generator=g)
        if self.cuda:
            self.x_cpu = self.x_cpu.pin_memory()
        self.y = torch.randint(0, 1000, (self.batch,), generator=g).to(self.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=self.cuda or None)
        self.info.update(batch=self.batch, px=self.px, accum=self.accum, timm=timm.__version__)

    def _data(self, again: bool) -> None:
        self.x = self.x_cpu.to(self.device, non_blocking=True)

    def loss_fn(self):
        import torch.nn.functional as F  # noqa: N812

        return F.cross_entropy(self.model(self.x), self.y) / self.accum

    def cycle(self):
        micro = [("data", self._data), ("forward", self._forward), ("backward", self._backward)]
        last = [*micro, ("optimizer", self._optimizer)]
        return [list(micro) for _ in range(self.accum - 1)] + [last]


class InferMixed(Loop):
    """Held out: inference + loss with fp32 and bf16 phases and a host-side logging phase."""

    name = "infer_mixed"
    replayable = ("embed_fp32", "encoder_bf16", "loss_fp32")  # no_grad, results overwritten
    removable = ("loss_fp32", "log")  # without them the step's other phases run unchanged

    def build(self) -> None:
        torch = self.torch
        nn = torch.nn
        if self.smoke:
            b, L, d, vocab, layers = 2, 16, 32, 64, 1  # noqa: N806
        else:
            b, L, d, vocab, layers = 32, 512, 1024, 32000, 6  # noqa: N806
        self.tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False  # true fp32 in the fp32 phases
        self.tokens = torch.randint(0, vocab, (b, L), device=self.device)
        self.targets = torch.randint(0, vocab, (b * L // 8,), device=self.device)
        self.emb = nn.Embedding(vocab, d).to(self.device)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)).to(
            self.device
        )
        layer = nn.TransformerEncoderLayer(d, max(1, d // 64), 4 * d, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).to(self.device)
        self.head = nn.Linear(d, vocab).to(self.device)
        for m in (self.emb, self.mlp, self.enc, self.head):
            m.eval()
        self.info.update(batch=b, seq=L, width=d, vocab=vocab, layers=layers)

    def _embed(self, again: bool) -> None:
        with self.torch.no_grad():
            h = self.emb(self.tokens)
            self.h = h + self.mlp(h)  # fp32

    def _encoder(self, again: bool) -> None:
        with self.torch.no_grad(), self.autocast(self.cuda):
            self.h2 = self.enc(self.h)

    def _loss(self, again: bool) -> None:
        import torch.nn.functional as F  # noqa: N812

        with self.torch.no_grad():
            z = self.h2[:, ::8].float().reshape(-1, self.h2.shape[-1])
            self.loss = F.cross_entropy(self.head(z), self.targets)  # fp32 over the vocabulary

    def _log(self, again: bool) -> None:
        value = float(self.loss.item())  # the host waits for the device
        self.info["last_log"] = f"loss {value:.4f}"
        time.sleep(0.002)

    def close(self) -> None:
        self.torch.backends.cuda.matmul.allow_tf32 = bool(getattr(self, "tf32", False))
        super().close()

    def cycle(self):
        return [[("embed_fp32", self._embed), ("encoder_bf16", self._encoder),
                 ("loss_fp32", self._loss), ("log", self._log)]]  # fmt: skip


LOOPS: dict[str, type[Loop]] = {
    c.name: c for c in (User4, HfBert, PlResNet50, VitAccum, InferMixed)
}
HELD_OUT = ("vit_accum", "infer_mixed")
