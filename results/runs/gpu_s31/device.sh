#!/bin/bash
# The thirty-first session's device call (results/regime.md, "Twice the rounds for three pairs that
# missed on seed 101: a screen on the lent GPU"; results/gpu.md). Run from the repository root on
# the device machine with .fmnist (the four Fashion-MNIST .gz files) and .whl (opacus) carried;
# results under $OUT. The GPU benchmark at this commit, then eight in-process runs side by side.
set -u
began=$SECONDS
mkdir -p /usr/share/datasets/fashion-mnist && cp .fmnist/*.gz /usr/share/datasets/fashion-mnist/
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
timeout "${BENCH_SECONDS:-150}" python3 -m analysis.gpu_benchmark --out "$OUT/gpu_benchmark.json" > "$OUT/bench.log" 2>&1
echo "benchmark rc=$? after $((SECONDS - began)) s"; grep -c "'error'" "$OUT/bench.log"
export OMP_NUM_THREADS=1
left=$(( ${TOTAL_SECONDS:-540} - (SECONDS - began) ))
echo "screen: $left s"
mkdir -p runs
# file rounds eval_every seeds (the longest first)
while read -r file rounds every seeds; do
  for seed in $seeds; do
    timeout "$left" python3 -m simulator.cli run "scenarios/uv/fmnist_$file.yaml" \
      --set executor=in_process --set 'ray.worker_pools=[]' --set ray.num_workers=1 \
      --set ray.worker.num_cpus=1 --set ray.worker.num_gpus=1 --set seed=$seed \
      --set training.rounds=$rounds --set eval.every=$every --set output.checkpoint_every=1000 \
      --out "runs/${file}_s$seed" --quiet > "runs/${file}_s$seed.log" 2>&1 &
  done
done <<'LIST'
joint_shift_local_simclr_semi10 200 50 101
joint_shift_federated_simclr_semi10 200 50 101
label_skew_spectral_uv_semi10 160 40 101
label_skew_spectral_semi10 160 40 101
covariate_shift_spectral_uv 80 20 101 102
covariate_shift_spectral 80 20 101 102
LIST
sleep 30; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv; uptime
wait
echo "all done after $((SECONDS - began)) s"
tar czf "$OUT/runs.tgz" runs/*.log runs/*/metrics.parquet runs/*/summary.json runs/*/scenario.yaml 2>/dev/null
python3 - <<'PY'
import glob, json
import pyarrow.parquet as pq
for p in sorted(glob.glob("runs/*/metrics.parquet")):
    rows = pq.read_table(p).to_pylist()
    evals = {}
    for r in rows:
        if r["name"] in ("eval/knn_top1", "eval/linear_top1"):
            evals.setdefault(r["round"], {})[r["name"][5:8]] = round(100 * r["value"], 2)
    print(p.split("/")[1], evals)
PY
for f in runs/*.log; do grep -l -i "error\|Traceback" $f; done
