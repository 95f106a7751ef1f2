#!/bin/bash
# The 100c10 Hetero-SSFL files with one or two large_cnn workers: same logged values, seconds a round
# (results/hetero.md, fifty-first session). Waits for the seed-178 RAD control run to end; the machine otherwise idle.
cd /work/exp51
while pgrep -f "results/runs/status_s51/status.sh" > /dev/null; do sleep 20; done
echo "$(date +%T) pools at $(git rev-parse --short HEAD)"
for n in 1 2; do
  out=pools_large$n
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp51 /work/main/.venv/bin/python -m simulator.cli run scenarios/hetero/fmnist_100c10_rad_control.yaml \
    --set seed=178 --set training.rounds=6 --set eval.every=6 \
    --set "ray.worker_pools=[{name: small_cnn, count: 1, num_cpus: 1, num_gpus: 0}, {name: large_cnn, count: $n, num_cpus: 1, num_gpus: 0}]" \
    --out /work/runs/s51/$out --quiet > /work/runs/s51/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
done
/work/main/.venv/bin/python - <<'PY'
import json
from pathlib import Path
from analysis.run_diff import diff_runs, logged_values
a, b = (Path(f"/work/runs/s51/pools_large{n}") for n in (1, 2))
for p in (a, b):
    s = json.load(open(p / "summary.json"))
    print(p.name, "wall %.0f s, steady %.1f s a round" % (s["wall_seconds"], s["steady_seconds_per_round"]))
d = diff_runs(logged_values(a), logged_values(b))
print("rounds 0 to", d.last_round, "compared,", d.compared, "values | differing:",
      sorted({k[1] for k, _, _ in d.differing}))
PY
echo "$(date +%T) done"
