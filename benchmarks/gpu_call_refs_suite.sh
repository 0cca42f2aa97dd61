#!/usr/bin/env bash
# One device call, either card: issue 20's reference loops, then the GPU test suite.
#   JP_COMMIT=$(git rev-parse HEAD) B=240 bash benchmarks/gpu_call_refs_suite.sh   (on the device)
# L (loops) defaults by card: H200 -> vit_accum_repeat,vit_accum,infer_mixed;
# H100 -> user4,user4_repeat,infer_mixed. B is ref_loops.py's wall budget (s); SUITE=0 skips
# the suite. Wheels the device lacks go in .gpuwork/.gpusite (benchmarks/README.md, top).
# Writes $OUT/card.txt, $OUT/rl.tar (ref_loops.py's results) and $OUT/gpu_tests.txt.
set -u
: "${JP_COMMIT:?set JP_COMMIT to the commit the tree carries}"
export PYTHONPATH=$PWD/src:$PWD/.gpuwork/.gpusite JP_COMMIT
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv | tee "$OUT/card.txt"
if [ -z "${L:-}" ]; then
  if nvidia-smi -L | grep -q H200; then L=vit_accum_repeat,vit_accum,infer_mixed
  else L=user4,user4_repeat,infer_mixed; fi
fi
B=${B:-300}
rm -rf /tmp/rl  # a warm machine keeps /tmp: an earlier call's loops must not ride in this tar
timeout $((B + 40)) python3 benchmarks/ref_loops.py --out /tmp/rl --loops "$L" --fine-s 60 \
  --excite-s 60 --pack --budget-s "$B" 2>&1 | tee /tmp/rl.log | tail -8
cp /tmp/rl.log /tmp/rl/ && tar cf "$OUT/rl.tar" -C /tmp rl
if [ "${SUITE:-1}" = 1 ]; then
  timeout 210 python3 -m pytest tests/gpu -q -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.txt" | tail -6
fi
true
