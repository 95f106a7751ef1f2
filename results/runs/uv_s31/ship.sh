#!/bin/bash
# The label-skew Spectral / Spectral+UV _semi10 pair at 160 rounds (results/regime.md, thirty-first session);
# worktree 8571e99; after the status check's runs; stop at the first miss; none started after 19:10.
cd /work/exp31b
while pgrep -f status4.sh > /dev/null; do sleep 10; done
for seed in 101 100 116; do
  for x in label_skew_spectral_uv_semi10 label_skew_spectral_semi10; do
    out=r160_${x}_s$seed
    if [ "$(date +%H%M)" \> "1910" ]; then echo "$(date +%T) cut-off: $out not started"; continue; fi
    rm -f /tmp/ray/ray_current_cluster
    echo "$(date +%T) start $out"
    PYTHONPATH=/work/exp31b /work/main/.venv/bin/python -m simulator.cli run scenarios/uv/fmnist_$x.yaml --set seed=$seed --set training.rounds=160 --out /work/runs/s31/$out --quiet > /work/runs/s31/$out.log 2>&1
    echo "$(date +%T) end $out rc=$?"
    verdict=$(/work/main/.venv/bin/python -c "
import json; d=json.load(open('/work/runs/s31/$out/summary.json')); i,f=d['initial'],d['final']
k=100*(f['knn_top1']-i['knn_top1']); p=100*(f['linear_top1']-i['linear_top1'])
print('clears' if k>=2 and p>=4 else 'misses', 'kNN %+.2f probe %+.2f rounds %d' % (k,p,d['rounds_completed']))")
    echo "$(date +%T) $out: $verdict"
    case "$verdict" in clears*rounds\ 160) ;; *) echo "stop: first miss"; exit 0;; esac
  done
done
echo done
