#!/bin/bash
# The 5c5 siblings jitter-0.8 screen (results/regime.md, "Colour jitter 0.8 in the two 5c5 siblings"):
# mu0 then rad_control, seeds 133, 134, 135 in order, one at a time, from a worktree of main, the machine
# otherwise idle. A run already finished (summary.json present) is skipped, so a batch cut short by a
# session's end is restarted with the same command; a run cut short is started afresh.
# Usage: bash batch.sh WORKTREE VENV OUTROOT
set -u
WT=$1; VENV=$2; OUT=$3
cd "$WT"
for F in fmnist_5c5_mu0 fmnist_5c5_rad_control; do
  for S in 133 134 135; do
    D="$OUT/${F}_s$S"
    if [ -f "$D/summary.json" ]; then echo "$F seed $S already finished"; continue; fi
    rm -rf "$D"
    rm -f /tmp/ray/ray_current_cluster
    echo "$F seed $S start $(date -u +%H:%M:%S)"
    "$VENV/bin/fedssl" run scenarios/hetero/$F.yaml --set seed=$S --set augment.brightness=0.8 \
      --set augment.contrast=0.8 --out "$D" --quiet
    echo "$F seed $S rc=$? end $(date -u +%H:%M:%S)"
  done
done
