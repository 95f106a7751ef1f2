#!/bin/bash
while ! grep -q '^real' /work/runs/s28/ci.log; do sleep 15; done
cd /work/exp28d
run() { # out sets...
  local out=$1; shift
  if [ "$(date +%H%M)" \> "1052" ]; then echo "$(date +%T) cut-off: $out not started"; return; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp28d /work/main/.venv/bin/python -m simulator.cli run scenarios/quickstart.yaml "$@" --set eval.every=100 --out /work/runs/s28/$out --quiet > /work/runs/s28/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
}
J="--set augment.brightness=0.8 --set augment.contrast=0.8"
run quick_G_s3 --set seed=3 $J
for seed in 6 7; do run quick_A_s$seed --set seed=$seed; run quick_G_s$seed --set seed=$seed $J; done
echo done
