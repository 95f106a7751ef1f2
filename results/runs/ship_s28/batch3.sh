#!/bin/bash
while ! grep -q '^done' /work/runs/s28/batch.log; do sleep 20; done
cd /work/exp28b
for seed in 100 101 106 107; do
  for arm in A K; do
    out=cross_${arm}_s$seed
    if [ "$(date +%H%M)" \> "1025" ]; then echo "$(date +%T) cut-off: $out not started"; continue; fi
    set_=""; [ $arm = K ] && set_="--set model.norm=batch"
    rm -f /tmp/ray/ray_current_cluster
    echo "$(date +%T) start $out"
    PYTHONPATH=/work/exp28b /work/main/.venv/bin/python -m simulator.cli run scenarios/cross_device.yaml --set seed=$seed --set eval.every=60 $set_ --out /work/runs/s28/$out --quiet > /work/runs/s28/$out.log 2>&1
    echo "$(date +%T) end $out rc=$?"
  done
done
echo done
