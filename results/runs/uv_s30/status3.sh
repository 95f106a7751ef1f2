#!/bin/bash
# Continuation with the cut-off moved to 16:25 (results/regime.md, written at 16:14); worktree 22ece9a.
cd /work/exp30b
while pgrep -f "status_uv_fmnist_covariate_shift_simsiam_s101" > /dev/null; do sleep 10; done
echo "$(date +%T) end status_uv_fmnist_covariate_shift_simsiam_s101"
for x in covariate_shift_simsiam_uv label_skew_simsiam_semi10 label_skew_simsiam_uv_semi10; do
  out=status_uv_fmnist_${x}_s101
  if [ "$(date +%H%M)" \> "1625" ]; then echo "$(date +%T) cut-off: $out not started"; continue; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp30b /work/main/.venv/bin/python -m simulator.cli run scenarios/uv/fmnist_$x.yaml --set seed=101 --out /work/runs/s30/$out --quiet > /work/runs/s30/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
done
echo "$(date +%T) cut-off: status_scaling_cross_device_500_s101 not started"
echo done
