#!/bin/bash
# The 5c5 jitter-0.8 screen (results/regime.md, "Colour jitter 0.8 in `hetero/fmnist_5c5.yaml` on fresh seeds"):
# seeds 127, 128, 129 in order, one at a time, from a worktree of main, the machine otherwise idle.
# Usage: bash batch.sh WORKTREE VENV OUTROOT
set -u
WT=$1; VENV=$2; OUT=$3
cd "$WT"
for S in 127 128 129; do
  rm -f /tmp/ray/ray_current_cluster
  echo "seed $S start $(date -u +%H:%M:%S)"
  "$VENV/bin/fedssl" run scenarios/hetero/fmnist_5c5.yaml --set seed=$S --set augment.brightness=0.8 \
    --set augment.contrast=0.8 --out "$OUT/G_s$S" --quiet
  echo "seed $S rc=$? end $(date -u +%H:%M:%S)"
done
