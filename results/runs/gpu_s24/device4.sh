#!/bin/bash
# The session's fourth device call: the benchmark's `engines` part (the third call's check, folded
# into analysis/gpu_benchmark.py), with Ray set up as device3.sh does (its lines up to `set up`).
# Carry .raycarry. Results under $OUT.
set -u
began=$SECONDS
source <(sed -n '/^mkdir -p \/tmp\/site/,/^echo "set up/p' results/runs/gpu_s24/device3.sh) || exit 1
timeout 200 python3 -m analysis.gpu_benchmark --parts engines --out "$OUT/engines.json" > "$OUT/engines.log" 2>&1
echo "rc=$? after $((SECONDS - began)) s"
grep "^{'run'" "$OUT/engines.log" | cut -c1-330; grep -i "Traceback\|Error" "$OUT/engines.log" | head
