#!/bin/bash
# Status check of hetero/fmnist_100c10_rad_control.yaml on seed 178 (results/regime.md, fifty-first session).
cd /work/exp51
echo "$(date +%T) status check at $(git rev-parse --short HEAD)"
out=status_hetero_fmnist_100c10_rad_control_s178
now=$(date +%H%M); if [ "$now" \> "1005" ]; then echo "$(date +%T) cut-off: $out not started"; exit 0; fi
rm -f /tmp/ray/ray_current_cluster
echo "$(date +%T) start $out"
PYTHONPATH=/work/exp51 /work/main/.venv/bin/python -m simulator.cli run scenarios/hetero/fmnist_100c10_rad_control.yaml --set seed=178 --out /work/runs/s51/$out --quiet > /work/runs/s51/$out.log 2>&1
echo "$(date +%T) end $out rc=$?"
/work/main/.venv/bin/python -c "
import json, yaml; d=json.load(open('/work/runs/s51/$out/summary.json')); i,f=d['initial'],d['final']
R=yaml.safe_load(open('/work/runs/s51/$out/scenario.yaml'))['training']['rounds']
k=100*(f['knn_top1']-i['knn_top1']); p=100*(f['linear_top1']-i['linear_top1'])
print('$(date +%T) $out:', 'clears' if k>=2 and p>=4 and d['rounds_completed']==R else 'misses', 'kNN %+.2f probe %+.2f rounds %d of %d' % (k,p,d['rounds_completed'],R))"
echo "$(date +%T) done"
