#!/bin/bash
cd /work/exp28
run() { # out scenario sets...
  local out=$1 sc=$2; shift 2
  if [ "$(date +%H%M)" \> "1025" ]; then echo "$(date +%T) cut-off: $out not started"; return; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp28 /work/main/.venv/bin/python -m simulator.cli run scenarios/fedavg/$sc.yaml "$@" --out /work/runs/s28/$out --quiet > /work/runs/s28/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
}
for seed in 108 109 110 111 112; do
  run A_s$seed simclr --set seed=$seed --set eval.every=50
  run K_s$seed simclr --set seed=$seed --set eval.every=50 --set model.norm=batch
  run G_s$seed simclr --set seed=$seed --set eval.every=50 --set augment.brightness=0.8 --set augment.contrast=0.8
done
for seed in 108 109; do
  for sc in simsiam fedu spectral federated_simclr_adam; do
    case $sc in simsiam|fedu) r=100;; *) r=50;; esac
    run ${sc}_A_s$seed $sc --set seed=$seed --set eval.every=$r
    run ${sc}_K_s$seed $sc --set seed=$seed --set eval.every=$r --set model.norm=batch
  done
done
echo done
