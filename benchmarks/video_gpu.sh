#!/usr/bin/env bash
# Issue 15's GPU calls on one H200, each within ~9 minutes; run from the repository root.
#   benchmarks/video_gpu.sh probe OUT   call 1: the probe cells not yet measured (most informative
#                                       first, within its budget), hiera-b's deployment cost, and
#                                       the video study's smoke cells and learning-rate search
#   benchmarks/video_gpu.sh study OUT   call 2: resumes the study (learning rates left, precision
#                                       and checkpointing ablation, confirmation), from the call-1
#                                       study committed under benchmarks/results/video_study/h200
#   benchmarks/video_gpu.sh rest OUT    the probe cells left (within JP_PROBE_S s), then the
#                                       study resumed (within JP_STUDY_S s), both kept in
#                                       JP_STATE (default /tmp/jp_video_state): a next call on the
#                                       same warm machine resumes where this one stopped; a fresh
#                                       machine starts again from the committed probe.csv and
#                                       study. OUT gets vp.tar.gz and vs.tar.gz of the state.
# Wheels (bitsandbytes for qlora/int8, hiera-transformer for hiera-b) come on PYTHONPATH; call 2
# needs none. OUT ends with a few archives and logs (each well under 16 MiB).
set -uo pipefail
WHAT=${1:?usage: benchmarks/video_gpu.sh probe|study OUT}
OUT=${2:?usage: benchmarks/video_gpu.sh probe|study OUT}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export JP_COMMIT=${JP_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
STUDY=(--models videomae-b,swin3d-b --methods full,lora)
# The probe's protocol, every call: ≥ 5 s timed steps (JP_PROBE_TIMED_S; the committed
# video_probe/probe table was measured at 3 s), and the rows of JP_PROBE_DONE count as done.
PROBE=(--batch-sizes 4,1 --timed-s "${JP_PROBE_TIMED_S:-5}" --cells-per-process 48
       --done "${JP_PROBE_DONE:-benchmarks/results/video_probe/probe_5s/probe.csv}")
SCALE=${JP_VIDEO_SCALE:-1}  # budgets x SCALE (CPU rehearsals: small)
b() { python3 -c "print(int($1 * $SCALE))"; }
case $WHAT in
probe)
    timeout -k 15 "$(b 215)" python3 benchmarks/video_probe.py --out "$OUT/vp" \
        --stages infer,probe --infer-models hiera-b "${PROBE[@]}" --budget-s "$(b 170)" \
        ${JP_PROBE_ARGS:-} \
        >"$OUT/probe.log" 2>&1
    echo "probe rc $?" >>"$OUT/probe.log"
    timeout -k 15 "$(b 275)" python3 benchmarks/video_study.py --out "$OUT/vs" --lr-only \
        --budget-s "$(b 220)" "${STUDY[@]}" ${JP_STUDY_ARGS:-} >"$OUT/study.log" 2>&1
    echo "study rc $?" >>"$OUT/study.log"
    tar czf "$OUT/vp.tar.gz" -C "$OUT" vp && rm -rf "$OUT/vp"
    ;;
study)
    if [ -d benchmarks/results/video_study/h200 ] && [ ! -d "$OUT/vs" ]; then
        cp -r benchmarks/results/video_study/h200 "$OUT/vs"
    fi
    timeout -k 15 "$(b 520)" python3 benchmarks/video_study.py --out "$OUT/vs" \
        --budget-s "$(b 430)" "${STUDY[@]}" ${JP_STUDY_ARGS:-} >"$OUT/study.log" 2>&1
    echo "study rc $?" >>"$OUT/study.log"
    ;;
rest)
    STATE=${JP_STATE:-/tmp/jp_video_state}
    mkdir -p "$STATE"
    if [ -d benchmarks/results/video_study/h200 ] && [ ! -d "$STATE/vs" ]; then
        cp -r benchmarks/results/video_study/h200 "$STATE/vs"
    fi
    PROBE_S=${JP_PROBE_S:-300}
    STUDY_S=${JP_STUDY_S:-0}
    if [ "$PROBE_S" -gt 0 ]; then
        timeout -k 15 "$((PROBE_S + 60))" python3 benchmarks/video_probe.py --out "$STATE/vp" \
            --stages probe "${PROBE[@]}" --budget-s "$PROBE_S" ${JP_PROBE_ARGS:-} \
            >>"$STATE/probe.log" 2>&1
        echo "probe rc $? at $(date -u +%FT%TZ)" >>"$STATE/probe.log"
    fi
    if [ "$STUDY_S" -gt 0 ]; then
        timeout -k 15 "$((STUDY_S + 80))" python3 benchmarks/video_study.py --out "$STATE/vs" \
            --budget-s "$STUDY_S" "${STUDY[@]}" ${JP_STUDY_ARGS:-} >>"$STATE/study.log" 2>&1
        echo "study rc $? at $(date -u +%FT%TZ)" >>"$STATE/study.log"
    fi
    cp "$STATE/probe.log" "$STATE/vp/" 2>/dev/null
    cp "$STATE/study.log" "$STATE/vs/" 2>/dev/null
    [ -d "$STATE/vp" ] && tar czf "$OUT/vp.tar.gz" -C "$STATE" vp
    rm -rf "$OUT/vs" && cp -r "$STATE/vs" "$OUT/vs"
    ;;
*)
    echo "unknown call $WHAT: probe, study or rest" >&2
    exit 2
    ;;
esac
# Per-cell samples stay (the attribution can be redone); the power buffers are dropped.
find "$OUT/vs" -name 'power_buffer*.csv' -delete 2>/dev/null
tar czf "$OUT/vs.tar.gz" -C "$OUT" vs && rm -rf "$OUT/vs"
ls -la "$OUT"
