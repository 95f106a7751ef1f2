#!/bin/bash
cd /work/exp27b
mkdir -p /work/runs/s27/knn
for seed in 104 105 106 107; do
  for arm in A K G; do
    case $arm in A) set_="";; K) set_="--set model.norm=batch";; G) set_="--set augment.brightness=0.8 --set augment.contrast=0.8";; esac
    if [ "$(date +%H%M)" \> "0805" ]; then echo "$(date +%T) cut-off: $arm s$seed not started"; continue; fi
    out=/work/runs/s27/knn/${arm}_s$seed
    rm -f /tmp/ray/ray_current_cluster
    echo "$(date +%T) start $arm s$seed"
    PYTHONPATH=/work/exp27b /work/main/.venv/bin/python -m simulator.cli run scenarios/fedavg/simclr.yaml \
      --set seed=$seed --set eval.every=50 $set_ --out $out --quiet > $out.log 2>&1
    echo "$(date +%T) end $arm s$seed rc=$?"
  done
done
echo done
