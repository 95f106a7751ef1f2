#!/bin/bash
# thirty-fourth session: hetero/fmnist_20c5_mu0.yaml claim seed 2 at 97537eb, AVX2 pin; SIGTERM at 04:22
cd /work/exp34c
rm -f /tmp/ray/ray_current_cluster
echo "$(date +%T) start repro_hetero_20c5_mu0_s2 (AVX2 pin)"
ATEN_CPU_CAPABILITY=avx2 DNNL_MAX_CPU_ISA=AVX2 PYTHONPATH=/work/exp34c /work/main/.venv/bin/python -m simulator.cli run scenarios/hetero/fmnist_20c5_mu0.yaml --set seed=2 --out /work/runs/s34/repro_hetero_20c5_mu0_s2 --quiet > /work/runs/s34/repro_hetero_20c5_mu0_s2.log 2>&1 &
pid=$!
while kill -0 $pid 2>/dev/null; do
  if [ "$(date +%H%M)" \> "0421" ] && [ "$(date +%H%M)" \< "2300" ]; then echo "$(date +%T) cut-off: SIGTERM"; kill -TERM $pid; sleep 30; fi
  sleep 10
done
wait $pid; echo "$(date +%T) end rc=$?"
