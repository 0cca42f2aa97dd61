#!/usr/bin/env bash
# What to run on the H200 (device tool), one stage per call, each well inside 10 minutes.
#   bash benchmarks/gpu_session.sh core    # measurement core: sensors, idle, matmul, sampler cost
#   bash benchmarks/gpu_session.sh attr    # V-JEPA2 vit_huge fine run: overhead + 3 attribution methods
#   bash benchmarks/gpu_session.sh study   # the batch-size × mode study; resumable across calls
# A dry run on a CPU: PRESET=tiny BATCH=2 ATTR_S=3 ISO_S=1 WORKERS=0 OUT=/tmp/o bash ... attr
# Carry .whl (the av wheel, for FakeVideo's PyAV decoding) and, for study, .gpuwork (the
# study's state from the previous call, a tarball fetched from $OUT and copied there).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
JP="python3 -m jouleprof.cli.main"
stamp() { echo "{\"date\": \"$(date -u +%FT%TZ)\", \"commit\": \"$(git rev-parse HEAD 2>/dev/null)\", \"dirty\": $( [ -n "$(git status --porcelain 2>/dev/null)" ] && echo true || echo false), \"gpu\": \"$(nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | head -1)\", \"stage\": \"$1\"}" > "$OUT/$1.meta.json"; }
case "${1:-}" in
  core)
    stamp core
    python3 -m pytest tests/gpu -q -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.txt" | tail -3
    python3 benchmarks/measure_core.py --out /tmp/measure_core --reps 3 --load-s 10 2>&1 | tail -25
    tar czf "$OUT/measure_core.tar.gz" -C /tmp measure_core ;;
  attr)
    stamp attr
    $JP profile vjepa2 --preset "${PRESET:-vit_huge}" --batch-size "${BATCH:-8}" --mode fine \
        --duration-s "${ATTR_S:-60}" --isolation-s "${ISO_S:-6}" --overhead-pairs 6 \
        --num-workers "${WORKERS:-12}" --out /tmp/attr_vith_b8 2>&1 | tail -40
    python3 benchmarks/attribution_compare.py /tmp/attr_vith_b8 --json /tmp/attr_vith_b8/compare.json
    tar czf "$OUT/attr_vith_b8.tar.gz" -C /tmp attr_vith_b8 ;;
  study)
    stamp study
    mkdir -p /tmp/study
    [ -f .gpuwork/study.tar.gz ] && tar xzf .gpuwork/study.tar.gz -C /tmp
    $JP study vjepa2 --preset "${PRESET:-vit_huge}" --batch-sizes "${BATCH_SIZES:-1,2,4,8,16,32}" \
        --modes baseline,e2e,fine --reps 3 --duration-s "${DURATION_S:-8}" --overhead-pairs 2 \
        --out /tmp/study --time-budget-s "${BUDGET_S:-480}" 2>&1 | tail -60
    tar czf "$OUT/study.tar.gz" -C /tmp study ;;
  *) echo "usage: $0 core|attr|study" >&2; exit 2 ;;
esac
