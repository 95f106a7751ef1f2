#!/bin/bash
# thirty-fifth session: hetero/fmnist_5c5.yaml, seed 102, colour jitter 0.8, one run from a frozen worktree at
# 628a0e1 seed 102 (results/regime.md); SIGTERM at 07:44
cd /work/exp35c
rm -f /tmp/ray/ray_current_cluster
echo "$(date +%T) start"
PYTHONPATH=/work/exp35c /work/main/.venv/bin/python -m simulator.cli run scenarios/hetero/fmnist_5c5.yaml --set seed=102 \
  --set augment.brightness=0.8 --set augment.contrast=0.8 --out /work/runs/s35/hetero_5c5_G_s102 --quiet > /work/runs/s35/hetero_5c5_G_s102.log 2>&1 &
pid=$!
while kill -0 $pid 2>/dev/null; do
  if [ "$(date +%H%M)" \> "0743" ] && [ "$(date +%H%M)" \< "2300" ]; then echo "$(date +%T) cut-off: SIGTERM"; kill -TERM $pid; sleep 30; fi
  sleep 10
done
wait $pid; echo "$(date +%T) end rc=$?"
