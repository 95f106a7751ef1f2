#!/bin/bash
# Thirty-third session: results/regime.md, the extension of "The shipped files with no run of current code";
# worktree at a6065b0; after status.sh's batch; none started after 01:00; a watchdog stops any at 01:15.
cd /work/exp33
until grep -q '^done' /work/runs/s33/status.out; do sleep 20; done
for item in repro_hetero_20c5_mu0_s1:hetero/fmnist_20c5_mu0:1 repro_hetero_20c5_rad_control_s0:hetero/fmnist_20c5_rad_control:0; do
  IFS=: read out f seed <<< "$item"
  if [ "$(date +%H%M)" \> "0100" ] && [ "$(date +%H%M)" \< "2300" ]; then echo "$(date +%T) cut-off: $out not started"; continue; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp33 /work/main/.venv/bin/python -m simulator.cli run scenarios/$f.yaml --set seed=$seed --out /work/runs/s33/$out --quiet > /work/runs/s33/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
done
echo done2
