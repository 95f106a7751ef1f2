#!/bin/bash
# The two pairs' other files on seed 116, as shipped (results/regime.md, written at 19:09); worktree 8571e99.
cd /work/exp31b
for x in label_skew_spectral_semi10 joint_shift_federated_simclr_semi10; do
  out=status_uv_fmnist_${x}_s116
  if [ "$(date +%H%M)" \> "1930" ]; then echo "$(date +%T) cut-off: $out not started"; continue; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp31b /work/main/.venv/bin/python -m simulator.cli run scenarios/uv/fmnist_$x.yaml --set seed=116 --out /work/runs/s31/$out --quiet > /work/runs/s31/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
done
echo done
