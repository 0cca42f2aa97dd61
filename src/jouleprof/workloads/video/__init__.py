"""Video classifiers (VideoMAE-B, TimeSformer-B, Video Swin-B, Hiera-B) behind one (B, T, C, H, W)
interface, their fine-tuning methods (full, LoRA, QLoRA, AdaLoRA, BitFit) and precisions (FP32,
FP16, BF16, INT8), and the training step the probe, the workload and `jouleprof run video` share.

Modules: `models` (the registry), `families` (one builder per model family), `swin_patch`,
`precision`, `adapt`, `step` (VideoTrainer), `workload` (the registry's Workload).
"""
