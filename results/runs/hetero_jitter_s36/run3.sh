#!/bin/bash
# thirty-sixth session: takes over from run2.sh (stopped while A_s122 went on, pid $1) after a `ray stop` of a
# test check at 08:52 ended G_s121's Ray instance at round 11 (results/regime.md, third amendment): waits for
# A_s122, resumes G_s121 from its round-10 checkpoint, then G_s122, A_s123, G_s123, one at a time, from the
# frozen worktree at b702c8f; no start after 10:15, SIGTERM at 10:45
cd /work/exp36
out=/work/runs/s36
watch() {
  while kill -0 $1 2>/dev/null; do
    if [ "$(date +%H%M)" \> "1044" ]; then echo "$(date +%T) cut-off: SIGTERM"; kill -TERM $1; sleep 30; fi
    sleep 10
  done
}
watch $1; echo "$(date +%T) end A_s122 (pid $1; exit status in its log)"
for run in G_121 G_122 A_123 G_123; do
  arm=${run%_*}; seed=${run#*_}
  if [ "$(date +%H%M)" \> "1015" ]; then echo "$(date +%T) cut-off: ${arm}_s$seed not started"; continue; fi
  rm -f /tmp/ray/ray_current_cluster
  if [ $run = G_121 ]; then
    echo "$(date +%T) resume ${arm}_s$seed"
    PYTHONPATH=/work/exp36 /work/main/.venv/bin/python -m simulator.cli run --resume $out/h20c5_${arm}_s$seed --quiet \
      > $out/h20c5_${arm}_s${seed}_resume.log 2>&1 &
  else
    case $arm in A) extra="";; G) extra="--set augment.brightness=0.8 --set augment.contrast=0.8";; esac
    echo "$(date +%T) start ${arm}_s$seed"
    PYTHONPATH=/work/exp36 /work/main/.venv/bin/python -m simulator.cli run scenarios/hetero/fmnist_20c5.yaml \
      --set seed=$seed $extra --set eval.every=24 --set eval.pixel_reference=false \
      --out $out/h20c5_${arm}_s$seed --quiet > $out/h20c5_${arm}_s$seed.log 2>&1 &
  fi
  pid=$!
  watch $pid
  wait $pid; echo "$(date +%T) end ${arm}_s$seed rc=$?"
done
