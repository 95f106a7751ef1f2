#!/usr/bin/env bash
# fifty-fourth session: results/fedsc.md "DP against non-private on the same sharing schedule"
# (the claim's own command would need both arms of a comparison; these are the runs it would make)
set -u
cd /work/exp54
export PYTHONPATH=/work/exp54
OUT=/work/exp54/results/runs/fedsc_dp_same_schedule/non_private_every2
mkdir -p $OUT
echo "start $(date)"
for seed in 0 1 2 3 4; do
  rm -f /tmp/ray/ray_current_cluster
  /work/main/.venv/bin/fedssl run scenarios/fedsc/fmnist_partial.yaml --set method.share_every=2 --set seed=$seed --out $OUT/seed_$seed --quiet
  echo "seed $seed rc=$? $(date)"
done
rm -f /tmp/ray/ray_current_cluster
/work/main/.venv/bin/fedssl run scenarios/fedsc/fmnist_partial_dp_eps8.yaml --set seed=0 --out /work/exp54/repro_eps8_s0 --quiet
echo "repro rc=$? $(date)"
/work/main/.venv/bin/fedssl diff /work/main/results/runs/fedsc_dp/dp_eps8/seed_0 /work/exp54/repro_eps8_s0
echo "diff rc=$? $(date)"
