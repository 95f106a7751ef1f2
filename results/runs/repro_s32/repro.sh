#!/bin/bash
# Reproduction check (results/regime.md, thirty-second session); worktree 0e7ce7e; none started after 21:35.
cd /work/exp32c
for pair in rotation_only:orchestra/rotation_only no_target:orchestra/no_target orchestra:orchestra/fashion_mnist fedavg_sc:fedsc/fmnist_full_fedavg_sc fedsc:fedsc/fmnist_full; do
  arm=${pair%%:*}; f=${pair#*:}; out=repro_${arm}_s0
  if [ "$(date +%H%M)" \> "2135" ]; then echo "$(date +%T) cut-off: $out not started"; continue; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp32c /work/main/.venv/bin/python -m simulator.cli run scenarios/$f.yaml --set seed=0 --out /work/runs/s32/$out --quiet > /work/runs/s32/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
done
echo done
