#!/bin/bash
# Thirty-third session: status3.sh's batch under the fourth amendment (results/regime.md): after the pinned
# mu 0.5 re-run (started by status3.sh) ends, the mu 0 re-run; the RAD control only if that ends by 00:25.
cd /work/exp33
export ATEN_CPU_CAPABILITY=avx2 DNNL_MAX_CPU_ISA=AVX2
while pgrep -f 'out /work/runs/s33/repro_hetero_20c5_mu05_s0' > /dev/null; do sleep 10; done
echo "$(date +%T) end repro_hetero_20c5_mu05_s0 (seen by status4.sh)"
for item in repro_hetero_20c5_mu0_s1:hetero/fmnist_20c5_mu0:1:0100 repro_hetero_20c5_rad_control_s0:hetero/fmnist_20c5_rad_control:0:0025; do
  IFS=: read out f seed cut <<< "$item"
  if [ "$(date +%H%M)" \> "$cut" ] && [ "$(date +%H%M)" \< "2300" ]; then echo "$(date +%T) cut-off $cut: $out not started"; continue; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out (AVX2 pin)"
  PYTHONPATH=/work/exp33 /work/main/.venv/bin/python -m simulator.cli run scenarios/$f.yaml --set seed=$seed --out /work/runs/s33/$out --quiet > /work/runs/s33/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
done
echo done4
