#!/bin/bash
# Thirty-third session: results/regime.md, section "The shipped files with no run of current code";
# worktree at a6065b0; one run at a time; the second not started after 00:35.
cd /work/exp33
for item in status_uv_js_simsiam_uv_semi10_s101:uv/fmnist_joint_shift_simsiam_uv_semi10:101 repro_hetero_20c5_mu05_s0:hetero/fmnist_20c5:0; do
  IFS=: read out f seed <<< "$item"
  if [ "$out" = repro_hetero_20c5_mu05_s0 ] && [ "$(date +%H%M)" \> "0035" ] && [ "$(date +%H%M)" \< "2300" ]; then echo "$(date +%T) cut-off: $out not started"; continue; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp33 /work/main/.venv/bin/python -m simulator.cli run scenarios/$f.yaml --set seed=$seed --out /work/runs/s33/$out --quiet > /work/runs/s33/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
done
echo done
