#!/bin/bash
# CPU screen (regime.md amendment at 5b57151). One run at a time; none started after 07:45.
cd /work/exp27
declare -A ARMS=(
  [A]="" [B]="--set augment.crop_scale=[0.08,1.0]" [C]="--set augment.crop_scale=[0.2,1.0]"
  [D]="--set augment.crop_scale=[0.6,1.0]" [E]="--set augment.crop_scale=[0.8,1.0]"
  [F]="--set augment.jitter_prob=0" [G]="--set augment.brightness=0.8 --set augment.contrast=0.8"
  [H]="--set augment.flip_prob=0" [I]="--set method.temperature=0.1" [J]="--set method.temperature=0.5"
  [K]="--set model.norm=batch" [L]="--set training.lr=0.1" [M]="--set training.local_epochs=2"
  [N]="--set training.rounds=100")
for arm in A K L M N B C D E F G H I J; do
  for seed in 102 103; do
    if [ "$(date +%H%M)" \> "0745" ]; then echo "$(date +%T) cut-off: $arm s$seed not started"; continue; fi
    out=/work/runs/s27/screen/${arm}_s$seed
    [ -f $out/summary.json ] && continue
    rm -f /tmp/ray/ray_current_cluster
    echo "$(date +%T) start $arm s$seed"
    PYTHONPATH=/work/exp27 /work/main/.venv/bin/python -m simulator.cli run scenarios/fedavg/simclr.yaml \
      --set seed=$seed --set eval.every=50 ${ARMS[$arm]} --out $out --quiet > $out.log 2>&1
    echo "$(date +%T) end $arm s$seed rc=$?"
  done
done
echo done
