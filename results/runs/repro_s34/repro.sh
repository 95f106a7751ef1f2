#!/bin/bash
# thirty-fourth session: five claim-seed misses of unknown code re-run at fbe3068, unpinned, one at a time,
# after the hetero 100c10 run; none started after 03:30, SIGTERM at 03:45
cd /work/exp34b
while ! grep -q " end rc=" /work/runs/s34/run.out; do sleep 15; done
for item in fedsc_dp_eps8_s3:fedsc/fmnist_partial_dp_eps8:3 orchestra_fedavg_simclr_s3:orchestra/fedavg_simclr:3 \
            orchestra_fedavg_simclr_s4:orchestra/fedavg_simclr:4 orchestra_no_degeneracy_s3:orchestra/no_degeneracy:3 \
            orchestra_no_degeneracy_s4:orchestra/no_degeneracy:4; do
  IFS=: read out f seed <<< "$item"
  if [ "$(date +%H%M)" \> "0329" ] && [ "$(date +%H%M)" \< "2300" ]; then echo "$(date +%T) cut-off: $out not started"; continue; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp34b /work/main/.venv/bin/python -m simulator.cli run scenarios/$f.yaml --set seed=$seed --out /work/runs/s34/$out --quiet > /work/runs/s34/$out.log 2>&1 &
  pid=$!
  while kill -0 $pid 2>/dev/null; do
    if [ "$(date +%H%M)" \> "0344" ] && [ "$(date +%H%M)" \< "2300" ]; then echo "$(date +%T) cut-off: SIGTERM $out"; kill -TERM $pid; sleep 30; fi
    sleep 10
  done
  wait $pid; echo "$(date +%T) end $out rc=$?"
done
