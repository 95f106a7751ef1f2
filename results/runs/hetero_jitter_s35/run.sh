#!/bin/bash
# thirty-fifth session: hetero/fmnist_5c5.yaml, seed 101, colour jitter 0.8, one run from a frozen worktree at
# 53ca7d7 after the clean-clone CI (results/regime.md); SIGTERM at 07:35
cd /work/exp35b
while [ ! -s /work/runs/s35/ci.time ]; do sleep 10; done
rm -f /tmp/ray/ray_current_cluster
echo "$(date +%T) start"
PYTHONPATH=/work/exp35b /work/main/.venv/bin/python -m simulator.cli run scenarios/hetero/fmnist_5c5.yaml --set seed=101 \
  --set augment.brightness=0.8 --set augment.contrast=0.8 --out /work/runs/s35/hetero_5c5_G_s101 --quiet > /work/runs/s35/hetero_5c5_G_s101.log 2>&1 &
pid=$!
while kill -0 $pid 2>/dev/null; do
  if [ "$(date +%H%M)" \> "0734" ] && [ "$(date +%H%M)" \< "2300" ]; then echo "$(date +%T) cut-off: SIGTERM"; kill -TERM $pid; sleep 30; fi
  sleep 10
done
wait $pid; echo "$(date +%T) end rc=$?"
