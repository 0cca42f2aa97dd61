#!/usr/bin/env bash
# One device call, either card (JP_COMMIT: the commit the tree carries; carry .gpuwork).
# H200: vit_accum_excite + vit_accum_repeat, then one 30 s sensors --lag-out loop.
# H100: vit_accum plain + excited (does excitation settle the ViT backward on this board?).
set -u
: "${JP_COMMIT:?set JP_COMMIT to the commit the tree carries}"
export PYTHONPATH=$PWD/src:$PWD/.gpuwork/.gpusite JP_COMMIT
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv | tee "$OUT/card.txt"
if nvidia-smi -L | grep -q H200; then L=vit_accum_excite,vit_accum_repeat; else L=vit_accum,vit_accum_excite; fi
rm -rf /tmp/rl
timeout 330 python3 benchmarks/ref_loops.py --out /tmp/rl --loops $L --fine-s 60 \
  --excite-s 60 --pack --budget-s 290 2>&1 | tee /tmp/rl.log | tail -8
cp /tmp/rl.log /tmp/rl/ && tar cf "$OUT/rl.tar" -C /tmp rl
if nvidia-smi -L | grep -q H200; then
  rm -rf /tmp/lagrun_1
  timeout 100 python3 -m jouleprof.cli.main sensors --lag-out $OUT/lag30_1.json --lag-s 30 --run-dir /tmp/lagrun_1 2>&1 | tail -2
  tar czf $OUT/lagruns.tar.gz -C /tmp lagrun_1
fi
ls -la $OUT
