#!/bin/bash
while ! grep -q '^done' /work/runs/s28/batch3.log; do sleep 20; done
cd /work/exp28c
run() { # out scenario sets...
  local out=$1 sc=$2; shift 2
  if [ "$(date +%H%M)" \> "1025" ]; then echo "$(date +%T) cut-off: $out not started"; return; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp28c /work/main/.venv/bin/python -m simulator.cli run scenarios/$sc.yaml "$@" --set augment.brightness=0.8 --set augment.contrast=0.8 --out /work/runs/s28/$out --quiet > /work/runs/s28/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
}
for seed in 100 101 106 107; do run cross_G_s$seed cross_device --set seed=$seed --set eval.every=60; done
for seed in 108 109; do run federated_simclr_adam_G_s$seed fedavg/federated_simclr_adam --set seed=$seed --set eval.every=50; done
echo done
