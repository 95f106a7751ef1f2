#!/bin/bash
# thirty-fifth session: BatchNorm encoder (K) / colour jitter 0.8 (G) against as shipped (A) on Orchestra's
# fedavg_simclr and no_degeneracy files, seeds 118-120, one run at a time from a frozen worktree (results/regime.md);
# none started after 06:55, SIGTERM at 07:10
W=$1
cd $W
declare -A ARM=([A]="" [K]="--set model.norm=batch" [G]="--set augment.brightness=0.8 --set augment.contrast=0.8")
for seed in 118 119 120; do
  for f in orchsimclr:fedavg_simclr orchnodegen:no_degeneracy; do
    IFS=: read tag file <<< "$f"
    for arm in A K G; do
      out=${tag}_${arm}_s${seed}
      if [ "$(date +%H%M)" \> "0654" ] && [ "$(date +%H%M)" \< "2300" ]; then echo "$(date +%T) cut-off: $out not started"; continue; fi
      rm -f /tmp/ray/ray_current_cluster
      echo "$(date +%T) start $out"
      PYTHONPATH=$W /work/main/.venv/bin/python -m simulator.cli run scenarios/orchestra/$file.yaml --set seed=$seed ${ARM[$arm]} --out /work/runs/s35/$out --quiet > /work/runs/s35/$out.log 2>&1 &
      pid=$!
      while kill -0 $pid 2>/dev/null; do
        if [ "$(date +%H%M)" \> "0709" ] && [ "$(date +%H%M)" \< "2300" ]; then echo "$(date +%T) cut-off: SIGTERM $out"; kill -TERM $pid; sleep 30; fi
        sleep 10
      done
      wait $pid; echo "$(date +%T) end $out rc=$?"
    done
  done
done
