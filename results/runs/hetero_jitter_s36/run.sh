#!/bin/bash
# thirty-sixth session: hetero/fmnist_20c5.yaml arms A (as shipped) and G (colour jitter 0.8) on fresh seeds
# 121-123, one run at a time from a frozen worktree at b702c8f (results/regime.md, "Colour jitter 0.8 on
# Hetero-SSFL 20c5's mu 0.5 arm", amendment); no start after 09:58, SIGTERM at 10:20
cd /work/exp36
out=/work/runs/s36
for seed in 121 122 123; do
  for arm in A G; do
    if [ "$(date +%H%M)" \> "0958" ]; then echo "$(date +%T) cut-off: ${arm}_s$seed not started"; continue; fi
    case $arm in A) extra="";; G) extra="--set augment.brightness=0.8 --set augment.contrast=0.8";; esac
    rm -f /tmp/ray/ray_current_cluster
    echo "$(date +%T) start ${arm}_s$seed"
    PYTHONPATH=/work/exp36 /work/main/.venv/bin/python -m simulator.cli run scenarios/hetero/fmnist_20c5.yaml \
      --set seed=$seed $extra --set eval.every=24 --set eval.pixel_reference=false \
      --out $out/h20c5_${arm}_s$seed --quiet > $out/h20c5_${arm}_s$seed.log 2>&1 &
    pid=$!
    while kill -0 $pid 2>/dev/null; do
      if [ "$(date +%H%M)" \> "1019" ]; then echo "$(date +%T) cut-off: SIGTERM"; kill -TERM $pid; sleep 30; fi
      sleep 10
    done
    wait $pid; echo "$(date +%T) end ${arm}_s$seed rc=$?"
  done
done
