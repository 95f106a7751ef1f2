#!/bin/bash
# Batch 32 for the joint-shift Local / Federated SimCLR _semi10 pair (results/regime.md, forty-eighth session);
# worktree /work/exp48b at 2a7dd29; stop at the first miss; none started after 01:05.
while ! grep -q "^end " /work/runs/s48/batch.log; do sleep 20; done
cd /work/exp48b
echo "$(date +%T) batch 32 at $(git rev-parse --short HEAD)"
for seed in 174 175 176; do
  for x in local federated; do
    out=b32_joint_shift_${x}_simclr_semi10_s$seed
    now=$(date +%H%M); if [ "$now" \> "0105" ] && [ "$now" \< "2300" ]; then echo "$(date +%T) cut-off: $out not started"; exit 0; fi
    rm -f /tmp/ray/ray_current_cluster
    echo "$(date +%T) start $out"
    PYTHONPATH=/work/exp48b /work/main/.venv/bin/python -m simulator.cli run scenarios/uv/fmnist_joint_shift_${x}_simclr_semi10.yaml --set seed=$seed --set training.batch_size=32 --out /work/runs/s48/$out --quiet > /work/runs/s48/$out.log 2>&1
    echo "$(date +%T) end $out rc=$?"
    verdict=$(/work/main/.venv/bin/python -c "
import json, yaml; d=json.load(open('/work/runs/s48/$out/summary.json')); i,f=d['initial'],d['final']
R=yaml.safe_load(open('/work/runs/s48/$out/scenario.yaml'))['training']['rounds']
k=100*(f['knn_top1']-i['knn_top1']); p=100*(f['linear_top1']-i['linear_top1'])
print('clears' if k>=2 and p>=4 and d['rounds_completed']==R else 'misses', 'kNN %+.2f probe %+.2f rounds %d of %d' % (k,p,d['rounds_completed'],R))")
    echo "$(date +%T) $out: $verdict"
    case "$verdict" in clears*) ;; *) echo "batch stops: first miss"; exit 0;; esac
  done
done
echo "$(date +%T) all six clear"
