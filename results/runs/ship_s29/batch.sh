#!/bin/bash
# Twenty-ninth session: results/regime.md, section "Shipping colour jitter 0.8 in the quickstart,
# and in the FedAvg family's other probe misses"; worktree at 474c8db.
cd /work/exp29
run() { # out scenario sets...
  local out=$1 scen=$2; shift 2
  if [ "$(date +%H%M)" \> "1255" ]; then echo "$(date +%T) cut-off: $out not started"; return; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp29 /work/main/.venv/bin/python -m simulator.cli run scenarios/$scen.yaml "$@" --out /work/runs/s29/$out --quiet > /work/runs/s29/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
}
J="--set augment.brightness=0.8 --set augment.contrast=0.8"
# Batch A
for s in 8 9 10 11 12; do run quick_G_s$s quickstart --set seed=$s --set eval.every=100 $J; done
run quick_G_s0 quickstart --set seed=0 $J
# Batch B
for s in 101 113 114; do
  for m in simsiam fedu spectral; do run ${m}_G_s$s fedavg/$m --set seed=$s $J; done
done
# Secondary
for s in 8 9 10 11 12; do run quick_A_s$s quickstart --set seed=$s --set eval.every=100; done
for s in 113 114; do
  for m in simsiam fedu spectral; do run ${m}_A_s$s fedavg/$m --set seed=$s; done
done
echo done
