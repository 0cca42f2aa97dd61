#!/usr/bin/env bash
# What to run on the lent H200 (device tool), one stage per call, each inside 10 minutes.
#   bash benchmarks/gpu_session.sh core    # tests/gpu, then measure_core (sensors, idle, matmul, sampler cost)
#   bash benchmarks/gpu_session.sh first   # tests/gpu (SKIP_TESTS=1: not), sampler cost, attr, then the study until DEADLINE_S
#   bash benchmarks/gpu_session.sh diag    # NVML tests, sampler cost, why real batches step slower
#   bash benchmarks/gpu_session.sh alone   # one GPU, host to itself: attr, replay, kernel probe, sampler cost, GPU tests
#   bash benchmarks/gpu_session.sh replay  # replayed forward+backward vs the same inside steps (CUDA events)
#   bash benchmarks/gpu_session.sh attr    # V-JEPA2 vit_huge fine run: overhead + 3 attribution methods
#                                          (ATTR_S seconds measured, ISO_S a loop, ISO_REPEATS rounds)
#   bash benchmarks/gpu_session.sh tests   # the whole GPU test suite (~2 min)
#   bash benchmarks/gpu_session.sh par     # two GPUs: study on GPU 1 beside sampler cost + attr on GPU 0, then both
#                                          (attr then shares the host with a study cell: use `alone` for its figures)
#   bash benchmarks/gpu_session.sh cells   # fresh cells (default batch 8 and 64, 1 rep): where a cell's time goes
#   bash benchmarks/gpu_session.sh options # each training option alone (checkpointing, AdamW kernel, accumulation, workers, compile)
#   bash benchmarks/gpu_session.sh probe   # instant-power kernel, NVML read costs, NVML tests, sampler cost,
#                                          then compile alone (recompiles logged)
#   bash benchmarks/gpu_session.sh sampler # NVML tests, sampler cost (20 ms config SAMPLER_REPS times)
#   bash benchmarks/gpu_session.sh next    # session 5's first call: NVML tests, sampler, kernel probe, e2e cells
#   bash benchmarks/gpu_session.sh verify  # session 5's last call: NVML tests, sampler cost, an e2e and a zeus cell
#   bash benchmarks/gpu_session.sh s6a     # session 6's first call: attr at ATTR_S (240) with the power buffer,
#                                          then the GPU tests and a busy→busy kernel probe while time allows
#   bash benchmarks/gpu_session.sh s6c     # session 6's second call: attr again (run7), busy→busy probe
#   bash benchmarks/gpu_session.sh s6b     # session 6's second call: busy→busy probe, options twice (default,
#                                          workers4, accum2, foreach)
#   bash benchmarks/gpu_session.sh study   # the batch-size × mode study until DEADLINE_S; resumable
# DEADLINE_S (default 540): seconds after the call's start by which the study starts no new cell
# (less the longest cell, RESERVE_S); the study resumes in the next call.
# A dry run on a CPU: PRESET=tiny BATCH=2 ATTR_S=3 ISO_S=1 WORKERS=0 OUT=/tmp/o bash ... attr
# Name the commit sent in the command (JP_COMMIT=<sha> bash ...): the device copy's .git can be
# stale (it reported the session's first commit, dirty, for later trees).
# Carry .whl (the av wheel, for FakeVideo's PyAV decoding) and, for study, .gpuwork (the
# study's state from the previous call: the study.tar.gz fetched from $OUT, copied there).
set -uo pipefail
T_START=$(date +%s)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export JOULEPROF_CACHE_DIR=${JOULEPROF_CACHE_DIR:-/tmp/jouleprof_cache}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
JP="python3 -m jouleprof.cli.main"
stamp() { echo "{\"date\": \"$(date -u +%FT%TZ)\", \"commit\": \"${JP_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}\", \"dirty\": $( [ -n "$(git status --porcelain 2>/dev/null)" ] && echo true || echo false), \"gpu\": \"$(nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | head -1)\", \"stage\": \"$1\"}" > "$OUT/$1.meta.json"; }
elapsed() { echo $(( $(date +%s) - T_START )); }

gpu_tests() {
  python3 -m pytest tests/gpu -q -p no:cacheprovider --durations=8 2>&1 | tee "$OUT/gpu_tests.txt" | tail -14
}
nvml_tests() {
  python3 -m pytest tests/gpu/test_nvml.py -q -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests_nvml.txt" | tail -3
}
sampler() {
  python3 benchmarks/measure_core.py --out /tmp/sampler_cost --only sampler --sampler-s "${SAMPLER_S:-10}" \
      --sampler-reps "${SAMPLER_REPS:-1}" 2>&1 | tail -$(( 5 + ${SAMPLER_REPS:-1} ))
  cp /tmp/sampler_cost/sampler_cost.json "$OUT/"
}
attr() {
  rm -rf /tmp/attr_vith_b8
  # One GPU, seen alone: on a two-GPU machine the idle one must not enter the figures.
  CUDA_VISIBLE_DEVICES=${ATTR_GPU:-0} $JP profile vjepa2 --preset "${PRESET:-vit_huge}" --batch-size "${BATCH:-8}" --mode fine \
      --duration-s "${ATTR_S:-30}" --isolation-s "${ISO_S:-6}" --isolation-repeats "${ISO_REPEATS:-1}" --overhead-pairs "${OV_PAIRS:-150}" --overhead-block-steps 1 \
      --num-workers "${WORKERS:-12}" --fixed-batch ${ATTR_FLAGS:-} --out /tmp/attr_vith_b8 2>&1 | tail -30
  python3 benchmarks/attribution_compare.py /tmp/attr_vith_b8 --json /tmp/attr_vith_b8/compare.json
  tar czf "$OUT/attr_vith_b8.tar.gz" -C /tmp attr_vith_b8
}
replay() {
  python3 benchmarks/replay_fidelity.py --out "$OUT/replay_fidelity.json" --preset "${PRESET:-vit_huge}" \
      --batch-size "${BATCH:-8}" --n "${REPLAY_N:-30}" 2>&1 | grep -v -i warn | tail -6
}
kernel_probe() {
  # PROBE_GAP=memory: the gaps hold a memory-bound phase, so the power steps busy→busy.
  local name=kernel_probe${PROBE_GAP:+_$PROBE_GAP}
  rm -rf "/tmp/$name"
  python3 benchmarks/kernel_probe.py --out "/tmp/$name" --seconds "${PROBE_S:-20}" \
      --gap-load "${PROBE_GAP:-idle}" 2>&1 | tail -2
  python3 benchmarks/instant_kernel.py "/tmp/$name" --json "/tmp/$name/kernels.json" 2>&1 | tail -9
  python3 benchmarks/counter_tail.py probe "/tmp/$name" --json "/tmp/$name/counter_tail.json" \
      > "/tmp/$name/counter_tail.txt" 2>&1; head -8 "/tmp/$name/counter_tail.txt"
  tar czf "$OUT/$name.tar.gz" -C /tmp "$name"
}
options_twice() {
  for rep in 1 2; do
    python3 benchmarks/options.py --out "/tmp/options_r$rep" --preset "${PRESET:-vit_huge}" --batch-size "${BATCH:-8}" \
        --duration-s "${OPT_S:-10}" --only "${OPT_ONLY:-default,workers4,accum2,foreach}" \
        --budget-s $(( ${DEADLINE_S:-560} - $(elapsed) - 45 )) 2>&1 | grep -v -i warn | tail -8
    tar czf "$OUT/options_r$rep.tar.gz" -C /tmp "options_r$rep"; echo "--- $(elapsed) s"
  done
}
study() {
  # STUDY_NAME (default study): the folder under /tmp and the tarball's name; only "study"
  # resumes from .gpuwork/study.tar.gz.
  local name=${STUDY_NAME:-study}
  [ "$name" != study ] && rm -rf "/tmp/$name"  # only "study" resumes; others start afresh
  mkdir -p "/tmp/$name"
  [ "$name" = study ] && [ -f .gpuwork/study.tar.gz ] && [ ! -f /tmp/study/study.json ] && tar xzf .gpuwork/study.tar.gz -C /tmp
  local budget=$(( ${DEADLINE_S:-540} - ${RESERVE_S:-50} - $(elapsed) ))
  echo "$name: $(elapsed) s into the call, budget $budget s"
  if [ "$budget" -gt 0 ]; then
    $JP study vjepa2 --preset "${PRESET:-vit_huge}" --batch-sizes "${BATCH_SIZES:-1,2,4,8,16,32,64,128}" \
        --modes "${MODES:-baseline,e2e,fine}" --reps "${REPS:-3}" --duration-s "${DURATION_S:-6}" --overhead-pairs 2 --overhead-block-steps 3 \
        --set "num_workers=${WORKERS:-12}" ${PARALLEL_GPUS:+--parallel-gpus "$PARALLEL_GPUS"} \
        --out "/tmp/$name" --time-budget-s "$budget" --no-report 2>&1 | tail -70
  fi
  tar czf "$OUT/$name.tar.gz" -C /tmp "$name"
}

case "${1:-}" in
  core)
    stamp core
    gpu_tests
    python3 benchmarks/measure_core.py --out /tmp/measure_core --reps 3 --load-s 10 2>&1 | tail -25
    tar czf "$OUT/measure_core.tar.gz" -C /tmp measure_core ;;
  first)
    stamp first
    [ -n "${SKIP_TESTS:-}" ] || { gpu_tests; echo "--- $(elapsed) s"; }
    sampler; echo "--- $(elapsed) s"
    attr; echo "--- $(elapsed) s"
    study ;;
  diag)
    stamp diag
    nvml_tests
    sampler; echo "--- $(elapsed) s"
    python3 benchmarks/diagnose_step.py --out "$OUT" --n "${DIAG_N:-12}" --workers 12,4,0 2>&1 | grep -v -i warn | tail -15 ;;
  par)
    # Two GPUs: the study runs on GPU 1 while the sampler cost and the attribution benchmark use
    # GPU 0 (ATTR_GPU); once they finish the study goes on over both GPUs until DEADLINE_S.
    stamp par
    ( PARALLEL_GPUS=1 DEADLINE_S=$(( ${ATTR_EST_S:-260} + ${RESERVE_S:-50} )) study > "$OUT/study_gpu1.log" 2>&1 ) &
    study_pid=$!
    sampler; echo "--- $(elapsed) s"
    attr; echo "--- $(elapsed) s"
    wait "$study_pid"; tail -5 "$OUT/study_gpu1.log"; echo "--- $(elapsed) s"
    PARALLEL_GPUS=0,1 study ;;
  replay) stamp replay; replay ;;
  alone)
    # One GPU, nothing else on the host: the attribution run, the replay-fidelity check, the
    # sampler cost, then the GPU tests (~7 min in all on the H200).
    stamp alone
    attr; echo "--- $(elapsed) s"
    replay; echo "--- $(elapsed) s"
    kernel_probe; echo "--- $(elapsed) s"
    sampler; echo "--- $(elapsed) s"
    gpu_tests ;;
  cells)
    # A few fresh cells (not the resumable study) to see where a cell's time goes now.
    stamp cells
    STUDY_NAME=cells BATCH_SIZES=${BATCH_SIZES:-8,64} REPS=${REPS:-1} study ;;
  options)
    # Each training option alone (checkpointing, optimizer kernel, accumulation, workers,
    # compile last), e2e mode, vit_huge batch 8: ~6 min.
    stamp options
    python3 benchmarks/options.py --out /tmp/options --preset "${PRESET:-vit_huge}" --batch-size "${BATCH:-8}" \
        --duration-s "${OPT_S:-10}" --budget-s "${OPT_BUDGET_S:-420}" 2>&1 | grep -v -i warn | tail -12
    tar czf "$OUT/options.tar.gz" -C /tmp options ;;
  probe)
    # The instant field's averaging kernel, what each NVML read and wake-up costs the host,
    # then torch.compile alone with its recompilations logged (~8 min).
    stamp probe
    kernel_probe; echo "--- $(elapsed) s"
    python3 benchmarks/nvml_read_cost.py --out "$OUT/nvml_read_cost.json" 2>&1 | grep -v -i warn | tail -12
    echo "--- $(elapsed) s"
    nvml_tests
    SAMPLER_S=${SAMPLER_S:-8} sampler; echo "--- $(elapsed) s"
    TORCH_LOGS=recompiles python3 benchmarks/options.py --out /tmp/options_compile --preset "${PRESET:-vit_huge}" \
        --batch-size "${BATCH:-8}" --duration-s "${OPT_S:-20}" --only compile \
        --timeout-s $(( ${DEADLINE_S:-560} - $(elapsed) )) 2>&1 | grep -v -i warn | tail -4
    tar czf "$OUT/options_compile.tar.gz" -C /tmp options_compile ;;
  sampler)
    # The NVML tests, then the sampler's CPU cost, its target configuration (20 ms) repeated.
    stamp sampler
    nvml_tests
    SAMPLER_REPS=${SAMPLER_REPS:-4} sampler ;;
  next)
    # Session 5's first call (~9 min): the GPU tests, sampler cost (20 ms four times), the kernel
    # probe and the attribution run, both with NVML's power buffer, then e2e and Zeus
    # cross-check cells at batch 8 and 64 (the edge counter fix; carry zeus and httpx wheels
    # in .whl) until DEADLINE_S.
    stamp next
    gpu_tests; echo "--- $(elapsed) s"
    SAMPLER_S=${SAMPLER_S:-8} SAMPLER_REPS=${SAMPLER_REPS:-4} sampler; echo "--- $(elapsed) s"
    kernel_probe; echo "--- $(elapsed) s"
    ATTR_FLAGS=--power-buffer attr; echo "--- $(elapsed) s"
    STUDY_NAME=cells BATCH_SIZES=${BATCH_SIZES:-8,64} MODES=${MODES:-e2e,zeus} REPS=${REPS:-1} study ;;
  verify)
    # Session 5's last call (~2.5 min): the NVML tests (read_fast), the sampler's cost with the
    # cold-poll cuts (58ee78a), and an e2e and a zeus cell at batch 8 (the segment end read
    # densely, 4266453; the cross-check's set-up outside the segment's clock, bae8bb6).
    stamp verify
    nvml_tests
    SAMPLER_S=${SAMPLER_S:-8} SAMPLER_REPS=${SAMPLER_REPS:-3} sampler; echo "--- $(elapsed) s"
    STUDY_NAME=cells BATCH_SIZES=${BATCH_SIZES:-8} MODES=${MODES:-e2e,zeus} REPS=${REPS:-1} study ;;
  attr) stamp attr; attr ;;
  s6a)
    # Session 6's first call (~9 min): attribution run6 (8 × run5's steps: the optimizer's bias
    # against its noise, the in-place optimizer reference), then, while the call has time, the
    # whole GPU test suite and the busy→busy kernel probe.
    stamp s6a
    ATTR_S=${ATTR_S:-240} ATTR_FLAGS=${ATTR_FLAGS---power-buffer} attr; echo "--- $(elapsed) s"
    if [ "$(elapsed)" -lt "${TESTS_BY_S:-430}" ]; then gpu_tests; echo "--- $(elapsed) s"; fi
    if [ "$(elapsed)" -lt "${PROBE_BY_S:-510}" ]; then PROBE_GAP=memory kernel_probe; fi ;;
  tests) stamp tests; gpu_tests ;;
  s6c)
    # Session 6's second call (~8 min): attribution run7, run6 repeated at the commit whose
    # regression cuts long phases into bins, then the busy→busy kernel probe.
    stamp s6c
    ATTR_S=${ATTR_S:-240} ATTR_FLAGS=${ATTR_FLAGS---power-buffer} attr; echo "--- $(elapsed) s"
    PROBE_GAP=memory kernel_probe ;;
  s6b)
    stamp s6b
    [ -n "${SKIP_PROBE:-}" ] || { PROBE_GAP=memory kernel_probe; echo "--- $(elapsed) s"; }
    options_twice ;;
  study) stamp study; study ;;
  *) echo "usage: $0 core|first|par|alone|replay|cells|options|probe|sampler|next|verify|diag|attr|tests|s6a|s6b|s6c|study" >&2; exit 2 ;;
esac
echo "=== done in $(elapsed) s"
