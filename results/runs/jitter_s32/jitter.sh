#!/bin/bash
# Colour jitter 0.8 in four UV pairs (results/regime.md, thirty-second session); worktree 06f01f7;
# per pair stop at the first miss; none started after 21:25.
cd /work/exp32
for pair in "joint_shift_local_simclr_semi10 joint_shift_federated_simclr_semi10" \
            "label_skew_spectral_uv_semi10 label_skew_spectral_semi10" \
            "covariate_shift_spectral_uv covariate_shift_spectral" \
            "covariate_shift_simsiam_uv covariate_shift_simsiam"; do
  echo "$(date +%T) pair: $pair"
  for seed in 116 101 100 117; do
    for x in $pair; do
      out=cj08_${x}_s$seed
      if [ "$(date +%H%M)" \> "2125" ]; then echo "$(date +%T) cut-off: $out not started"; continue 3; fi
      rm -f /tmp/ray/ray_current_cluster
      echo "$(date +%T) start $out"
      PYTHONPATH=/work/exp32 /work/main/.venv/bin/python -m simulator.cli run scenarios/uv/fmnist_$x.yaml --set seed=$seed --set augment.brightness=0.8 --set augment.contrast=0.8 --out /work/runs/s32/$out --quiet > /work/runs/s32/$out.log 2>&1
      echo "$(date +%T) end $out rc=$?"
      verdict=$(/work/main/.venv/bin/python -c "
import json, yaml; d=json.load(open('/work/runs/s32/$out/summary.json')); i,f=d['initial'],d['final']
R=yaml.safe_load(open('/work/runs/s32/$out/scenario.yaml'))['training']['rounds']
k=100*(f['knn_top1']-i['knn_top1']); p=100*(f['linear_top1']-i['linear_top1'])
print('clears' if k>=2 and p>=4 and d['rounds_completed']==R else 'misses', 'kNN %+.2f probe %+.2f rounds %d of %d' % (k,p,d['rounds_completed'],R))")
      echo "$(date +%T) $out: $verdict"
      case "$verdict" in clears*) ;; *) echo "pair stops: first miss"; continue 3;; esac
    done
  done
  echo "$(date +%T) pair cleared all eight: $pair"
done
echo done
