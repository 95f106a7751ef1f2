#!/bin/bash
# The session's second device call: the methods part alone on an idle GPU, each method twice with
# ray.cuda_deterministic off, then twice with it on (what the switches cost per method, and that
# without them no method repeats). Carry .whl (opacus); results under $OUT.
set -u
began=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
for on in false true; do
  timeout $(( ${TOTAL_SECONDS:-290} / 2 )) python3 -m analysis.gpu_benchmark --parts methods --cuda-deterministic $on \
    --out "$OUT/methods_$on.json" > "$OUT/methods_$on.log" 2>&1
  echo "switches $on: rc=$? after $((SECONDS - began)) s"
done
