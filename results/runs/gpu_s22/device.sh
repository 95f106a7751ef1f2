#!/bin/bash
# The twenty-second session's one device call (results/regime.md, "Hetero-SSFL 20c5's alignment
# arms past 24 rounds, on the lent GPU"; results/gpu.md): the GPU benchmark at this commit, then
# the Hetero-SSFL batch in the time left. Run from the repository root on the device machine, with
# .fmnist (the four Fashion-MNIST .gz files) and .whl (opacus) carried; results under $OUT.
set -u
began=$SECONDS
mkdir -p /usr/share/datasets/fashion-mnist && cp .fmnist/*.gz /usr/share/datasets/fashion-mnist/
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
timeout "${BENCH_SECONDS:-300}" python3 -m analysis.gpu_benchmark --out "$OUT/gpu_benchmark.json" > "$OUT/bench.log" 2>&1
echo "benchmark rc=$? after $((SECONDS - began)) s"; grep -c "'error'" "$OUT/bench.log"
left=$(( ${TOTAL_SECONDS:-570} - (SECONDS - began) ))
echo "hetero batch: $left s"
mkdir -p runs
for arm in fmnist_20c5 fmnist_20c5_mu0; do
  for seed in 101 102 103 104 105; do
    OMP_NUM_THREADS=1 timeout "$left" python3 -m simulator.cli run "scenarios/hetero/$arm.yaml" \
      --set executor=in_process --set 'ray.worker_pools=[]' --set ray.num_workers=1 \
      --set ray.worker.num_cpus=1 --set ray.worker.num_gpus=1 --set seed=$seed \
      --set training.rounds=48 --set eval.every=24 --set output.checkpoint_every=1000 \
      --out "runs/${arm}_s$seed" --quiet > "runs/${arm}_s$seed.log" 2>&1 &
  done
done
sleep 5; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv
wait
echo "hetero batch done after $((SECONDS - began)) s"
tar czf "$OUT/hetero_runs.tgz" runs/*.log runs/*/metrics.parquet runs/*/summary.json runs/*/scenario.yaml 2>/dev/null
tail -n 2 runs/*.log
