#!/bin/bash
# The thirty-sixth session's device call (results/regime.md, "Colour jitter 0.8 on Hetero-SSFL 20c5's mu 0.5
# arm: a screen on the lent GPU"). Run from the repository root on the device machine with .fmnist (the four
# Fashion-MNIST .gz files) carried; results under $OUT. Arms A (as shipped) and G (colour jitter 0.8) of
# scenarios/hetero/fmnist_20c5.yaml on fresh seeds 121-123, six runs side by side, in-process on CUDA.
# ROUNDS (default the shipped 24) and TOTAL_SECONDS (default 500) exist for the CPU smoke run of this script.
set -u
began=$SECONDS
rounds=${ROUNDS:-24}
if [ -d .fmnist ]; then mkdir -p /usr/share/datasets/fashion-mnist && cp .fmnist/*.gz /usr/share/datasets/fashion-mnist/; fi
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null; nproc
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())"
declare -A ARMS=([A]="" [G]="--set augment.brightness=0.8 --set augment.contrast=0.8")
runs=${OUT:-.}/runs
mkdir -p "$runs"
left=$(( ${TOTAL_SECONDS:-500} - (SECONDS - began) ))
for seed in 121 122 123; do
  for arm in A G; do
    timeout "$left" python3 -m simulator.cli run scenarios/hetero/fmnist_20c5.yaml --set seed=$seed \
      --set executor=in_process --set 'ray.worker_pools=[]' --set ray.num_workers=1 \
      --set ray.worker.num_cpus=1 --set ray.worker.num_gpus=1 --set training.rounds=$rounds \
      --set eval.every=$rounds --set eval.pixel_reference=false --set output.checkpoint_every=1000 \
      ${ARMS[$arm]} --out "$runs/${arm}_s$seed" --quiet > "$runs/${arm}_s$seed.log" 2>&1 &
  done
done
sleep 45; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv 2>/dev/null; uptime
wait
echo "all done after $((SECONDS - began)) s"
rm -rf "$runs"/*/checkpoints "$runs"/*/tensorboard
python3 - "$runs" <<'PY'
import glob, json, sys
for p in sorted(glob.glob(sys.argv[1] + "/*/summary.json")):
    d = json.load(open(p)); i, f = d["initial"], d["final"]
    print(p.split("/")[-2], d["rounds_completed"], round(d["wall_seconds"]),
          "knn %.2f -> %.2f (%+.2f)" % (100 * i["knn_top1"], 100 * f["knn_top1"], 100 * (f["knn_top1"] - i["knn_top1"])),
          "probe %.2f -> %.2f (%+.2f)" % (100 * i["linear_top1"], 100 * f["linear_top1"], 100 * (f["linear_top1"] - i["linear_top1"])))
PY
for f in "$runs"/*.log; do grep -l -i "error\|Traceback" "$f"; done
