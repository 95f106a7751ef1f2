#!/bin/bash
# BatchNorm in the encoder for the joint-shift SimCLR _semi10 pair (results/regime.md, thirty-second session);
# worktree 4c1eaaf; after jitter.sh; stop at the first miss; none started after 21:30.
cd /work/exp32b
while pgrep -f jitter.sh > /dev/null; do sleep 10; done
for seed in 116 101 100 117; do
  for x in joint_shift_local_simclr_semi10 joint_shift_federated_simclr_semi10; do
    out=bn_${x}_s$seed
    if [ "$(date +%H%M)" \> "2130" ]; then echo "$(date +%T) cut-off: $out not started"; continue; fi
    rm -f /tmp/ray/ray_current_cluster
    echo "$(date +%T) start $out"
    PYTHONPATH=/work/exp32b /work/main/.venv/bin/python -m simulator.cli run scenarios/uv/fmnist_$x.yaml --set seed=$seed --set model.norm=batch --out /work/runs/s32/$out --quiet > /work/runs/s32/$out.log 2>&1
    echo "$(date +%T) end $out rc=$?"
    verdict=$(/work/main/.venv/bin/python -c "
import json, yaml; d=json.load(open('/work/runs/s32/$out/summary.json')); i,f=d['initial'],d['final']
R=yaml.safe_load(open('/work/runs/s32/$out/scenario.yaml'))['training']['rounds']
k=100*(f['knn_top1']-i['knn_top1']); p=100*(f['linear_top1']-i['linear_top1'])
print('clears' if k>=2 and p>=4 and d['rounds_completed']==R else 'misses', 'kNN %+.2f probe %+.2f rounds %d of %d' % (k,p,d['rounds_completed'],R))")
    echo "$(date +%T) $out: $verdict"
    case "$verdict" in clears*) ;; *) echo "stop: first miss"; exit 0;; esac
  done
done
echo done
