#!/bin/bash
# The thirty-fourth session's device call (results/gpu.md): the quickstart in-process on CUDA with its
# live evaluation on, twice side by side (the evaluator thread's torch thread count pinned since
# 45a62f3; the pair is compared afterwards by `fedssl diff`), then the benchmark's fifteen method rows at
# this session's code. Run from the repository root on the device machine with .fmnist (the four
# Fashion-MNIST .gz files) and .whl (opacus) carried; results under $OUT.
set -u
began=$SECONDS
mkdir -p /usr/share/datasets/fashion-mnist && cp .fmnist/*.gz /usr/share/datasets/fashion-mnist/
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
for copy in a b; do
  timeout 200 python3 -m simulator.cli run scenarios/quickstart.yaml --set executor=in_process \
    --set 'ray.worker_pools=[]' --set ray.num_workers=1 --set ray.worker.num_cpus=1 --set ray.worker.num_gpus=1 \
    --set training.rounds=6 --set eval.every=3 --set eval.train_subset=5000 --set eval.test_subset=2000 \
    --set output.checkpoint_every=1000 --out "$OUT/quickstart_$copy" --quiet > "$OUT/quickstart_$copy.log" 2>&1 &
done
wait
echo "quickstart pair done after $((SECONDS - began)) s"
rm -rf "$OUT"/quickstart_?/checkpoints "$OUT"/quickstart_?/tensorboard
timeout 240 python3 -m analysis.gpu_benchmark --parts methods --out "$OUT/gpu_benchmark_methods.json" > "$OUT/bench_methods.log" 2>&1
echo "benchmark rc=$? after $((SECONDS - began)) s"
