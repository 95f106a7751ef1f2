#!/bin/bash
# The twenty-third session's one device call (results/gpu.md, "Determinism switches";
# results/regime.md, "Hetero-SSFL 20c5 at a client lr of 0.1, on the lent GPU"). Run from the
# repository root on the device machine, with .fmnist (the four Fashion-MNIST .gz files) and .whl
# (opacus) carried; results under $OUT.
#   1. the repeat check alone: the quickstart's shape with a ResNet-18, twice with
#      ray.cuda_deterministic off, twice with it on (the switches' cost, on an otherwise idle GPU);
#   2. then, side by side: every method twice as shipped (switches on: does each repeat, which ops
#      warn), and the Hetero-SSFL batch (8 runs) in the time left.
set -u
began=$SECONDS
mkdir -p /usr/share/datasets/fashion-mnist && cp .fmnist/*.gz /usr/share/datasets/fashion-mnist/
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
timeout 120 python3 -m analysis.gpu_benchmark --parts repeat --out "$OUT/repeat.json" > "$OUT/repeat.log" 2>&1
echo "repeat rc=$? after $((SECONDS - began)) s"
left=$(( ${TOTAL_SECONDS:-555} - (SECONDS - began) ))
echo "methods and hetero batch: $left s"
timeout "$left" python3 -m analysis.gpu_benchmark --parts methods --out "$OUT/methods.json" > "$OUT/methods.log" 2>&1 &
mkdir -p runs
for lr in 0.05 0.1; do
  for seed in 106 107 108 109; do
    OMP_NUM_THREADS=1 timeout "$left" python3 -m simulator.cli run scenarios/hetero/fmnist_20c5.yaml \
      --set executor=in_process --set 'ray.worker_pools=[]' --set ray.num_workers=1 \
      --set ray.worker.num_cpus=1 --set ray.worker.num_gpus=1 --set seed=$seed \
      --set training.lr=$lr --set output.checkpoint_every=1000 \
      --out "runs/lr${lr}_s$seed" --quiet > "runs/lr${lr}_s$seed.log" 2>&1 &
  done
done
sleep 10; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv
wait
echo "all done after $((SECONDS - began)) s"
tar czf "$OUT/hetero_runs.tgz" runs/*.log runs/*/metrics.parquet runs/*/summary.json runs/*/scenario.yaml 2>/dev/null
tail -n 2 runs/*.log
