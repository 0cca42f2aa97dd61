"""`jouleprof data ...`: dataset manifests and frame caches for the video benchmark."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from jouleprof.cli.console import err_console, fail, note, out_console

data_app = typer.Typer(
    help="Video datasets: manifests (path,label,label_id,split) and decoded frame caches.",
    no_args_is_help=True,
)

MAX_LISTED = 20


def manifest_cmd(
    dataset: Annotated[str, typer.Argument(help="mod20, era or uavhuman.")],
    root: Annotated[Path, typer.Argument(help="The dataset's folder, as unpacked.")],
    out: Annotated[Path, typer.Option(help="The manifest CSV to write.")],
    protocol: Annotated[
        str | None, typer.Option(help="UAV-Human cross-subject protocol: csv1 or csv2.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the split.")] = 17,
    val_fraction: Annotated[
        float | None,
        typer.Option(
            help="Fraction of each class carved from train for val (default 0.15; UAV-Human 0.1).",
            min=0.0,
            max=0.9,
        ),
    ] = None,
    test_fraction: Annotated[
        float,
        typer.Option(
            help="MOD20 only (no official split): fraction of each class for test.",
            min=0.0,
            max=0.9,
        ),
    ] = 0.15,
    val_by: Annotated[
        str,
        typer.Option(
            help="UAV-Human only: clip (stratified by action) or subject (subject-disjoint val)."
        ),
    ] = "clip",
) -> None:
    """Build a manifest: path (relative to ROOT), label, label_id, split."""
    from jouleprof.data.manifests import DATASETS, ManifestError, build_manifest, write_manifest

    if dataset not in DATASETS:
        fail(f"unknown dataset {dataset!r}: choose one of {', '.join(DATASETS)}")
    if protocol is not None and dataset != "uavhuman":
        fail("--protocol applies to uavhuman only (MOD20 and ERA have one split)")
    opts: dict[str, object] = {"seed": seed}
    if val_fraction is not None:
        opts["val_fraction"] = val_fraction
    if dataset == "mod20":
        opts["test_fraction"] = test_fraction
    if dataset == "uavhuman":
        opts["protocol"] = protocol or "csv1"
        opts["val_by"] = val_by
    try:
        manifest = build_manifest(dataset, root, **opts)
        path = write_manifest(manifest, out, root)
    except (ManifestError, OSError) as e:
        fail(str(e))
    counts = manifest.counts()
    classes = len({r.label for r in manifest.rows})
    out_console.print(
        f"{path}: {len(manifest.rows)} clips, {classes} classes "
        f"(train {counts['train']}, val {counts['val']}, test {counts['test']})",
        highlight=False,
    )
    empty = [k for k in ("train", "val", "test") if not counts[k]]
    if empty:
        err_console.print(
            f"[yellow]warning:[/] split(s) {', '.join(empty)} hold no clip (too few clips per "
            "class for --val-fraction/--test-fraction): `jouleprof data check` and a fine-tuning "
            "run need every split",
            highlight=False,
        )
    if manifest.skipped:
        err_console.print(
            f"[yellow]warning:[/] {len(manifest.skipped)} file(s) under {escape(str(root))} were "
            f"not used (all listed in {escape(str(path.with_name(path.stem + '.skipped.csv')))}):",
            highlight=False,
        )
        for s in manifest.skipped[:MAX_LISTED]:
            err_console.print(f"  {s.path}: {s.reason}", highlight=False, markup=False)
        if len(manifest.skipped) > MAX_LISTED:
            err_console.print(f"  … and {len(manifest.skipped) - MAX_LISTED} more", highlight=False)
    irregular = manifest.info.get("irregular_names") or []
    if irregular:
        note(
            f"{len(irregular)} clip(s) with irregular names kept (labelled by their folder), "
            f"e.g. {irregular[:3]}"
        )
    mismatch = manifest.info.get("name_folder_mismatch") or []
    if mismatch:
        err_console.print(
            f"[yellow]warning:[/] {len(mismatch)} clip(s) whose name's class differs from their "
            f"folder (the folder was used), e.g. {escape(str(mismatch[:3]))}",
            highlight=False,
        )


def cache_cmd(
    manifest: Annotated[Path, typer.Argument(help="A manifest CSV (`jouleprof data manifest`).")],
    out: Annotated[
        Path | None, typer.Option(help="Cache folder (default: MANIFEST's name + '_cache').")
    ] = None,
    root: Annotated[
        Path | None, typer.Option(help="Dataset root (default: the one the manifest records).")
    ] = None,
    frames: Annotated[
        int | None,
        typer.Option(
            help="Frames kept per clip, spread over it (default 32, or the cache's).", min=1
        ),
    ] = None,
    size_px: Annotated[
        int | None,
        typer.Option(help="Short side of the kept frames (default 256, or the cache's).", min=8),
    ] = None,
    workers: Annotated[int, typer.Option(help="Decoding processes.", min=1)] = 1,
) -> None:
    """Decode every clip once into a uint8 frame cache (PyAV); rerun to resume."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from jouleprof.data.cache import CacheError, CacheSpec, FrameCache
    from jouleprof.data.manifests import ManifestError, load_manifest

    try:
        import av  # noqa: F401
    except ImportError:
        fail("decoding needs PyAV: pip install av (or jouleprof[video])")
    try:
        m = load_manifest(manifest, root, required_splits=())
        folder = out or manifest.with_name(manifest.stem + "_cache")
        if frames is None and size_px is None and (folder / "cache.json").is_file():
            cache = FrameCache(folder)  # resuming: the cache's own settings
        else:
            spec = CacheSpec(
                num_frames=32 if frames is None else frames,
                size_px=256 if size_px is None else size_px,
            )
            cache = FrameCache(folder, spec)
    except (ManifestError, CacheError) as e:
        fail(str(e))
    clips = [(r.path, m.abspath(r)) for r in m.rows]
    with Progress(
        TextColumn("[bold]decoding"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
    ) as bar:
        task = bar.add_task("clips", total=len(clips))
        report = cache.build(
            clips,
            workers=workers,
            manifest_path=m.csv_path,
            on_clip=lambda rel, status: bar.advance(task),
        )
    out_console.print(
        f"{cache.folder}: {len(report.decoded)} decoded, {len(report.reused)} already cached, "
        f"{len(report.failed)} failed",
        highlight=False,
    )
    if report.failed:
        err_console.print(
            f"[yellow]warning:[/] {len(report.failed)} clip(s) could not be decoded (listed in "
            f"{escape(str(cache.folder / 'errors.csv'))}; rerun to retry them):",
            highlight=False,
        )
        for rel, why in report.failed[:MAX_LISTED]:
            err_console.print(f"  {rel}: {why}", highlight=False, markup=False)
        raise typer.Exit(1)


def check_cmd(
    manifest: Annotated[Path, typer.Argument(help="A manifest CSV.")],
    root: Annotated[Path | None, typer.Option(help="Dataset root (default: recorded).")] = None,
) -> None:
    """Check a manifest: files exist, labels consistent, no empty split."""
    from jouleprof.data.manifests import ManifestError, load_manifest

    try:
        m = load_manifest(manifest, root, required_splits=("train", "val"))
    except ManifestError as e:
        fail(str(e))
    counts = {s: len(m.split(s)) for s in ("train", "val", "test")}
    out_console.print(
        f"{m.csv_path}: ok — {len(m.rows)} clips, {len(m.classes)} classes, {counts}; "
        f"root {m.root}",
        highlight=False,
    )


data_app.command("manifest")(manifest_cmd)
data_app.command("cache")(cache_cmd)
data_app.command("check")(check_cmd)


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
