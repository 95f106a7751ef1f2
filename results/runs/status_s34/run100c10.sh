#!/bin/bash
# thirty-fourth session: hetero/fmnist_100c10.yaml on seed 100 at 45a62f3, unpinned; SIGTERM at 03:50
cd /work/exp34
rm -f /tmp/ray/ray_current_cluster
echo "$(date +%T) start hetero_100c10_s100"
PYTHONPATH=/work/exp34 /work/main/.venv/bin/python -m simulator.cli run scenarios/hetero/fmnist_100c10.yaml --set seed=100 --out /work/runs/s34/hetero_100c10_s100 --quiet > /work/runs/s34/hetero_100c10_s100.log 2>&1 &
pid=$!
while kill -0 $pid 2>/dev/null; do
  if [ "$(date +%H%M)" \> "0349" ] && [ "$(date +%H%M)" \< "2300" ]; then echo "$(date +%T) cut-off: SIGTERM"; kill -TERM $pid; fi
  sleep 20
done
wait $pid; echo "$(date +%T) end rc=$?"
