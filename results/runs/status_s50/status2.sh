#!/bin/bash
# The UV joint-shift SimSiam+UV _semi10 file on seed 178 (results/regime.md, fiftieth session); started after status.sh ends, only before 08:10.
until grep -q " done$" /work/main/results/runs/status_s50/status.log; do sleep 20; done
cd /work/exp50
echo "$(date +%T) status check at $(git rev-parse --short HEAD)"
for x in fmnist_joint_shift_simsiam_uv_semi10; do
  out=status_uv_${x}_s178
  now=$(date +%H%M); if [ "$now" \> "0810" ] && [ "$now" \< "2300" ]; then echo "$(date +%T) cut-off: $out not started"; continue; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp50 /work/main/.venv/bin/python -m simulator.cli run scenarios/uv/$x.yaml --set seed=178 --out /work/runs/s50/$out --quiet > /work/runs/s50/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
  /work/main/.venv/bin/python -c "
import json, yaml; d=json.load(open('/work/runs/s50/$out/summary.json')); i,f=d['initial'],d['final']
R=yaml.safe_load(open('/work/runs/s50/$out/scenario.yaml'))['training']['rounds']
k=100*(f['knn_top1']-i['knn_top1']); p=100*(f['linear_top1']-i['linear_top1'])
print('$(date +%T) $out:', 'clears' if k>=2 and p>=4 and d['rounds_completed']==R else 'misses', 'kNN %+.2f probe %+.2f rounds %d of %d' % (k,p,d['rounds_completed'],R))"
done
echo "$(date +%T) done"
