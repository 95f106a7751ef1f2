#!/bin/bash
# Twenty-ninth session: results/regime.md, section "The FedAvg family's other shipped scenarios on
# seeds 113 and 114"; worktree at 0406ec5; waits for the clean-clone CI.
while ! grep -q '^real' /work/runs/s29/ci.log; do sleep 15; done
cd /work/exp29b
run() { # out scenario sets...
  local out=$1 scen=$2; shift 2
  if [ "$(date +%H%M)" \> "1335" ]; then echo "$(date +%T) cut-off: $out not started"; return; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp29b /work/main/.venv/bin/python -m simulator.cli run scenarios/$scen.yaml "$@" --out /work/runs/s29/$out --quiet > /work/runs/s29/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
}
for s in 113 114; do
  for m in simclr federated_simclr_adam byol; do run status_${m}_s$s fedavg/$m --set seed=$s; done
done
run status_fedema_s113 fedavg/fedema --set seed=113
echo done
