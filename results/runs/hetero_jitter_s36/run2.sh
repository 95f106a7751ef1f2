#!/bin/bash
# thirty-sixth session: takes over from run.sh (killed at 08:16 while its first run, A_s121, went on) with the
# amended clock of results/regime.md: waits for that run (pid $1), then the other five, one at a time, from the
# frozen worktree at b702c8f; no start after 10:15, SIGTERM at 10:45
cd /work/exp36
out=/work/runs/s36
watch() {
  while kill -0 $1 2>/dev/null; do
    if [ "$(date +%H%M)" \> "1044" ]; then echo "$(date +%T) cut-off: SIGTERM"; kill -TERM $1; sleep 30; fi
    sleep 10
  done
}
watch $1; echo "$(date +%T) end A_s121 (pid $1; exit status in its log)"
for run in G_121 A_122 G_122 A_123 G_123; do
  arm=${run%_*}; seed=${run#*_}
  if [ "$(date +%H%M)" \> "1015" ]; then echo "$(date +%T) cut-off: ${arm}_s$seed not started"; continue; fi
  case $arm in A) extra="";; G) extra="--set augment.brightness=0.8 --set augment.contrast=0.8";; esac
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start ${arm}_s$seed"
  PYTHONPATH=/work/exp36 /work/main/.venv/bin/python -m simulator.cli run scenarios/hetero/fmnist_20c5.yaml \
    --set seed=$seed $extra --set eval.every=24 --set eval.pixel_reference=false \
    --out $out/h20c5_${arm}_s$seed --quiet > $out/h20c5_${arm}_s$seed.log 2>&1 &
  pid=$!
  watch $pid
  wait $pid; echo "$(date +%T) end ${arm}_s$seed rc=$?"
done
