#!/bin/bash
# The UV status check's runs left out by the thirtieth session's cut-off (results/regime.md, written at
# 17:10 of the thirty-first session); worktree 22ece9a, seed 101, cut-off 19:05.
cd /work/exp31
for x in uv/fmnist_label_skew_simsiam_semi10 uv/fmnist_label_skew_simsiam_uv_semi10 scaling/cross_device_500; do
  out=status_$(echo $x | tr / _)_s101
  if [ "$(date +%H%M)" \> "1905" ]; then echo "$(date +%T) cut-off: $out not started"; continue; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp31 /work/main/.venv/bin/python -m simulator.cli run scenarios/$x.yaml --set seed=101 --out /work/runs/s31/$out --quiet > /work/runs/s31/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
done
echo done
