#!/bin/bash
# The session's second device call: the federation's rates before (.bench_before/, the code at
# f7709b7, carried) and after the foreach optimiser step and the in-place fixed-point arithmetic,
# alternating, three times each; then every method twice with the new code and the switches on
# (all run on CUDA, each repeats bitwise). Carry .bench_before and .whl (opacus); results under $OUT.
set -u
began=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1
here=$PWD
for attempt in 1 2 3; do
  for code in before after; do
    dir=$here; [ $code = before ] && dir=$here/.bench_before
    (cd "$dir" && PYTHONPATH=/tmp/site:$dir timeout 150 python3 "$here/results/runs/gpu_s24/federation_profile.py" \
      --no-profile --out "$OUT/rates_${code}_$attempt" > "$OUT/rates_${code}_$attempt.log" 2>&1)
    echo "$code $attempt: rc=$? after $((SECONDS - began)) s"; grep "^{" "$OUT/rates_${code}_$attempt.log" | cut -c1-400
  done
done
PYTHONPATH=/tmp/site:$here timeout $(( ${TOTAL_SECONDS:-500} - (SECONDS - began) )) python3 -m analysis.gpu_benchmark \
  --parts methods --out "$OUT/methods_after.json" > "$OUT/methods_after.log" 2>&1
echo "methods: rc=$? after $((SECONDS - began)) s"
grep -c "'values_differing': 0" "$OUT/methods_after.log"; grep -o "'method': '[^']*'\|'values_differing': [0-9]*\|'images_per_second': [0-9.]*\|'error': '[^']*'" "$OUT/methods_after.log" | paste - - - | head -20
