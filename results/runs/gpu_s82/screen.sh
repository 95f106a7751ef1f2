#!/bin/bash
# The eighty-second session's second device call (results/regime.md, "The same screen on fresh seeds, three
# runs to a call", written in the fortieth session). Run from the repository root on the device machine with .fmnist
# (the four Fashion-MNIST .gz files) carried; results under $OUT. Three in-process runs side by side,
# stopped when TOTAL_SECONDS are spent. ROUNDS=1 smoke-runs it (on a CPU: DEVICE=cpu).
set -u
nproc
began=$SECONDS
if [ -d .fmnist ]; then mkdir -p /usr/share/datasets/fashion-mnist && cp .fmnist/*.gz /usr/share/datasets/fashion-mnist/; fi
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
PY=${PY:-python3}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null
$PY -c "import torch; print('torch', torch.__version__, torch.cuda.is_available())"
rounds=${ROUNDS:-128}; every=$rounds; gpus=1; [ "${DEVICE:-cuda}" = cpu ] && gpus=0
left=$(( ${TOTAL_SECONDS:-520} - (SECONDS - began) ))
echo "screen: $left s, $rounds rounds"
mkdir -p runs
# name file seed extra-keys
while read -r name file seed extra; do
  timeout "$left" $PY -m simulator.cli run "scenarios/hetero/$file.yaml" \
    --set executor=in_process --set 'ray.worker_pools=[]' --set ray.num_workers=1 \
    --set ray.worker.num_cpus=1 --set ray.worker.num_gpus=$gpus --set seed=$seed \
    --set training.rounds=$rounds --set eval.every=$every --set eval.pixel_reference=false \
    --set output.checkpoint_every=1000 $extra \
    --out "runs/${name}_s$seed" --quiet > "runs/${name}_s$seed.log" 2>&1 &
done <<'LIST'
G fmnist_100c10 131 --set augment.brightness=0.8 --set augment.contrast=0.8
G fmnist_100c10 132 --set augment.brightness=0.8 --set augment.contrast=0.8
Gmu0 fmnist_100c10_mu0 131 --set augment.brightness=0.8 --set augment.contrast=0.8
LIST
sleep 45; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv 2>/dev/null; uptime
wait
echo "all done after $((SECONDS - began)) s"
mkdir -p "$OUT"
tar czf "$OUT/runs.tgz" runs/*.log runs/*/metrics.parquet runs/*/summary.json runs/*/scenario.yaml 2>/dev/null
$PY - <<'PYEOF'
import glob
import pyarrow.parquet as pq
for p in sorted(glob.glob("runs/*/metrics.parquet")):
    rows = pq.read_table(p).to_pylist()
    evals, last = {}, 0
    for r in rows:
        last = max(last, r["round"])
        if r["name"] in ("eval/knn_top1", "eval/linear_top1"):
            evals.setdefault(r["round"], {})[r["name"][5:8]] = round(100 * r["value"], 2)
    print(p.split("/")[1], "last round", last, evals)
PYEOF
for f in runs/*.log; do grep -l -i "error\|Traceback" $f; done
