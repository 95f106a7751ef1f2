#!/bin/bash
# The eighty-second session's first device call (results/gpu.md): the benchmark's fifteen method rows at
# this session's code (methods/ and simulator/ changed in 47 files since the fortieth session's call at
# 580c4ad). Run from the repository root on the device machine with .whl (opacus) carried; results
# under $OUT.
set -u
began=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
timeout ${BENCH_SECONDS:-400} python3 -m analysis.gpu_benchmark --parts methods ${SMOKE:-} --out "$OUT/gpu_benchmark_methods.json" > "$OUT/bench_methods.log" 2>&1
echo "benchmark rc=$? after $((SECONDS - began)) s"
tail -25 "$OUT/bench_methods.log"
