#!/usr/bin/env bash
# One device call, either card: `jouleprof sensors --lag-out` on the GPU (its tests/gpu test,
# then two 30 s lag loops, their run directories kept as $OUT/lagruns.tar.gz); on an H200 also
# infer_mixed plain and with excitation gaps (ref_loops, B s of budget, default 250; $OUT/rl.tar).
#   JP_COMMIT=$(git rev-parse HEAD) bash benchmarks/gpu_call_sensor_lag.sh   (on the device; carry .gpuwork)
set -u
export PYTHONPATH=$PWD/src:$PWD/.gpuwork/.gpusite
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv | tee $OUT/card.txt
timeout 150 python3 -m pytest tests/gpu/test_sensor_lag_gpu.py -q -s -p no:cacheprovider 2>&1 | tee $OUT/gpu_test_sensor_lag.txt | tail -4
rm -rf /tmp/lagrun_1 /tmp/lagrun_2
for i in 1 2; do
  timeout 120 python3 -m jouleprof.cli.main sensors --lag-out $OUT/lag30_$i.json --lag-s 30 --run-dir /tmp/lagrun_$i 2>&1 | tail -2
done
tar czf $OUT/lagruns.tar.gz -C /tmp lagrun_1 lagrun_2
if nvidia-smi -L | grep -q H200; then
  rm -rf /tmp/rl
  timeout 300 python3 benchmarks/ref_loops.py --out /tmp/rl --loops infer_mixed,infer_mixed_excite --fine-s 60 \
    --excite-s 60 --pack --budget-s "${B:-250}" 2>&1 | tee /tmp/rl.log | tail -6
  cp /tmp/rl.log /tmp/rl/ && tar cf $OUT/rl.tar -C /tmp rl
fi
ls -la $OUT
