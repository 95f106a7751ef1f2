#!/bin/bash
# Thirtieth session: results/regime.md, section "The UV folder's scenarios run only on the search
# seed, on a fresh seed"; worktree at 22ece9a; seed 101; decides nothing. Continuation after the CI (cut-off 16:30).
while ! grep -q '^real' /work/runs/s30/ci.log; do sleep 15; done
cd /work/exp30b
run() { # scenario path without .yaml
  local scen=$1 out=status_$(echo $1 | tr / _)_s101
  if [ "$(date +%H%M)" \> "1630" ]; then echo "$(date +%T) cut-off: $out not started"; return; fi
  [ -f /work/runs/s30/$out/summary.json ] && return
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp30b /work/main/.venv/bin/python -m simulator.cli run scenarios/$scen.yaml --set seed=101 --out /work/runs/s30/$out --quiet > /work/runs/s30/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
}
for s in joint_shift covariate_shift label_skew; do
  for a in federated local; do run uv/fmnist_${s}_${a}_simclr_semi10; done
done
for s in joint_shift label_skew covariate_shift; do
  for v in spectral_uv_semi10 spectral_semi10 spectral_uv spectral; do run uv/fmnist_${s}_$v; done
done
for x in label_skew_simsiam label_skew_simsiam_uv joint_shift_simsiam joint_shift_simsiam_uv \
         covariate_shift_simsiam_semi10 covariate_shift_simsiam_uv_semi10 covariate_shift_simsiam \
         covariate_shift_simsiam_uv label_skew_simsiam_semi10 label_skew_simsiam_uv_semi10; do
  run uv/fmnist_$x
done
run scaling/cross_device_500
echo done
