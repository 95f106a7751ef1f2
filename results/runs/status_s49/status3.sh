#!/bin/bash
# The single-seed files outside the UV folder on seed 177 (results/regime.md, forty-ninth session); none started after 05:25.
while pgrep -f "runs/s49/status2.sh" > /dev/null || pgrep -f "runs/s49/status.sh" > /dev/null; do sleep 20; done
cd /work/exp49
echo "$(date +%T) status check 3 at $(git rev-parse --short HEAD)"
for x in scaling/benchmark orchestra/rotpred scaling/cross_device_500 orchestra/fedavg_spectral \
  orchestra/fashion_mnist_alpha_1e-3 orchestra/fashion_mnist_alpha_1e5 orchestra/rotation_only \
  fedsc/fmnist_full_fedavg_sc orchestra/no_target orchestra/fashion_mnist fedsc/fmnist_full; do
  out=status_${x//\//_}_s177
  now=$(date +%H%M); if [ "$now" \> "0525" ] && [ "$now" \< "2300" ]; then echo "$(date +%T) cut-off: $out not started"; continue; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp49 /work/main/.venv/bin/python -m simulator.cli run scenarios/$x.yaml --set seed=177 --out /work/runs/s49/$out --quiet > /work/runs/s49/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
  /work/main/.venv/bin/python -c "
import json, yaml; d=json.load(open('/work/runs/s49/$out/summary.json')); i,f=d['initial'],d['final']
R=yaml.safe_load(open('/work/runs/s49/$out/scenario.yaml'))['training']['rounds']
k=100*(f['knn_top1']-i['knn_top1']); p=100*(f['linear_top1']-i['linear_top1'])
print('$(date +%T) $out:', 'clears' if k>=2 and p>=4 and d['rounds_completed']==R else 'misses', 'kNN %+.2f probe %+.2f rounds %d of %d' % (k,p,d['rounds_completed'],R))"
done
echo "$(date +%T) done"
