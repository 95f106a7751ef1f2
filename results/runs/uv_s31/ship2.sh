#!/bin/bash
# The joint-shift Federated / Local SimCLR _semi10 pair at 200 rounds (results/regime.md, thirty-first session);
# worktree 8571e99; after ship.sh; stop at the first miss; none started after 19:10.
cd /work/exp31b
while pgrep -f "ship.sh" > /dev/null; do sleep 10; done
for seed in 101 100 116; do
  for x in joint_shift_local_simclr_semi10 joint_shift_federated_simclr_semi10; do
    out=r200_${x}_s$seed
    if [ "$(date +%H%M)" \> "1910" ]; then echo "$(date +%T) cut-off: $out not started"; continue; fi
    rm -f /tmp/ray/ray_current_cluster
    echo "$(date +%T) start $out"
    PYTHONPATH=/work/exp31b /work/main/.venv/bin/python -m simulator.cli run scenarios/uv/fmnist_$x.yaml --set seed=$seed --set training.rounds=200 --out /work/runs/s31/$out --quiet > /work/runs/s31/$out.log 2>&1
    echo "$(date +%T) end $out rc=$?"
    verdict=$(/work/main/.venv/bin/python -c "
import json; d=json.load(open('/work/runs/s31/$out/summary.json')); i,f=d['initial'],d['final']
k=100*(f['knn_top1']-i['knn_top1']); p=100*(f['linear_top1']-i['linear_top1'])
print('clears' if k>=2 and p>=4 else 'misses', 'kNN %+.2f probe %+.2f rounds %d' % (k,p,d['rounds_completed']))")
    echo "$(date +%T) $out: $verdict"
    case "$verdict" in clears*rounds\ 200) ;; *) echo "stop: first miss"; exit 0;; esac
  done
done
echo done
