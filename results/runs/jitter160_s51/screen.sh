#!/bin/bash
# Colour jitter 0.8 + 160 rounds for the label-skew Spectral / Spectral+UV _semi10 pair (results/regime.md,
# fifty-first session): stop at the first miss; none started after 11:05.
cd /work/exp51
echo "$(date +%T) screen at $(git rev-parse --short HEAD)"
for s in 179 180 181 182; do
  for x in label_skew_spectral_uv_semi10 label_skew_spectral_semi10; do
    out=j160_${x}_s$s
    now=$(date +%H%M); if [ "$now" \> "1105" ]; then echo "$(date +%T) cut-off: $out not started"; exit 0; fi
    rm -f /tmp/ray/ray_current_cluster
    echo "$(date +%T) start $out"
    PYTHONPATH=/work/exp51 /work/main/.venv/bin/python -m simulator.cli run scenarios/uv/fmnist_$x.yaml --set seed=$s \
      --set training.rounds=160 --set augment.brightness=0.8 --set augment.contrast=0.8 \
      --out /work/runs/s51/$out --quiet > /work/runs/s51/$out.log 2>&1
    echo "$(date +%T) end $out rc=$?"
    verdict=$(/work/main/.venv/bin/python -c "
import json, yaml; d=json.load(open('/work/runs/s51/$out/summary.json')); i,f=d['initial'],d['final']
R=yaml.safe_load(open('/work/runs/s51/$out/scenario.yaml'))['training']['rounds']
k=100*(f['knn_top1']-i['knn_top1']); p=100*(f['linear_top1']-i['linear_top1'])
print('clears' if k>=2 and p>=4 and d['rounds_completed']==R==160 else 'misses', 'kNN %+.2f probe %+.2f rounds %d of %d' % (k,p,d['rounds_completed'],R))")
    echo "$(date +%T) $out: $verdict"
    case "$verdict" in misses*) echo "$(date +%T) first miss: batch stops"; exit 0;; esac
  done
done
echo "$(date +%T) done: all eight clear"
