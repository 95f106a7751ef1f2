#!/bin/bash
# Status check of eight UV files on seed 180 (results/regime.md, fifty-first session), beside status.sh's run;
# none started after 11:10.
cd /work/exp51
echo "$(date +%T) status check at $(git rev-parse --short HEAD)"
for x in joint_shift_local_simclr joint_shift_federated_simclr joint_shift_spectral_uv label_skew_spectral \
         covariate_shift_local_simclr_semi10 label_skew_federated_simclr_semi10 covariate_shift_spectral_uv_semi10 \
         label_skew_local_simclr_semi10; do
  out=status_uv_fmnist_${x}_s180
  now=$(date +%H%M); if [ "$now" \> "1110" ]; then echo "$(date +%T) cut-off: $out not started"; continue; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp51 /work/main/.venv/bin/python -m simulator.cli run scenarios/uv/fmnist_$x.yaml --set seed=180 --out /work/runs/s51/$out --quiet > /work/runs/s51/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
  /work/main/.venv/bin/python -c "
import json, yaml; d=json.load(open('/work/runs/s51/$out/summary.json')); i,f=d['initial'],d['final']
R=yaml.safe_load(open('/work/runs/s51/$out/scenario.yaml'))['training']['rounds']
k=100*(f['knn_top1']-i['knn_top1']); p=100*(f['linear_top1']-i['linear_top1'])
print('$(date +%T) $out:', 'clears' if k>=2 and p>=4 and d['rounds_completed']==R else 'misses', 'kNN %+.2f probe %+.2f rounds %d of %d' % (k,p,d['rounds_completed'],R))"
done
echo "$(date +%T) done"
