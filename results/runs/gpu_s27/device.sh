#!/bin/bash
# The twenty-seventh session's device call (results/regime.md, "Augmentation, temperature, encoder
# norm and local work under the papers' label skew: a screen on the lent GPU"). Run from the
# repository root on the device machine with .fmnist (the four Fashion-MNIST .gz files) carried;
# results under $OUT. 14 arms x seeds 102, 103 of scenarios/fedavg/simclr.yaml, side by side.
set -u
began=$SECONDS
mkdir -p /usr/share/datasets/fashion-mnist && cp .fmnist/*.gz /usr/share/datasets/fashion-mnist/
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
declare -A ARMS=(
  [A]=""
  [B]="--set augment.crop_scale=[0.08,1.0]"
  [C]="--set augment.crop_scale=[0.2,1.0]"
  [D]="--set augment.crop_scale=[0.6,1.0]"
  [E]="--set augment.crop_scale=[0.8,1.0]"
  [F]="--set augment.jitter_prob=0"
  [G]="--set augment.brightness=0.8 --set augment.contrast=0.8"
  [H]="--set augment.flip_prob=0"
  [I]="--set method.temperature=0.1"
  [J]="--set method.temperature=0.5"
  [K]="--set model.norm=batch"
  [L]="--set training.lr=0.1"
  [M]="--set training.local_epochs=2"
  [N]="--set training.rounds=100"
)
mkdir -p runs
left=$(( ${TOTAL_SECONDS:-520} - (SECONDS - began) ))
for arm in N M A B C D E F G H I J K L; do
  for seed in 102 103; do
    timeout "$left" python3 -m simulator.cli run scenarios/fedavg/simclr.yaml \
      --set executor=in_process --set 'ray.worker_pools=[]' --set ray.num_workers=1 \
      --set ray.worker.num_cpus=1 --set ray.worker.num_gpus=1 --set seed=$seed \
      --set eval.every=50 --set output.checkpoint_every=1000 ${ARMS[$arm]} \
      --out "runs/${arm}_s$seed" --quiet > "runs/${arm}_s$seed.log" 2>&1 &
  done
done
sleep 30; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv; uptime
wait
echo "all done after $((SECONDS - began)) s"
tar czf "$OUT/runs.tgz" runs/*.log runs/*/metrics.parquet runs/*/summary.json runs/*/scenario.yaml 2>/dev/null
python3 - <<'PY'
import glob, json
for p in sorted(glob.glob("runs/*/summary.json")):
    d = json.load(open(p)); i, f = d["initial"], d["final"]
    print(p.split("/")[1], d["rounds_completed"], round(d["wall_seconds"]),
          "knn %.2f -> %.2f" % (100 * i["knn_top1"], 100 * f["knn_top1"]),
          "probe %.2f -> %.2f" % (100 * i["linear_top1"], 100 * f["linear_top1"]))
PY
for f in runs/*.log; do grep -l -i "error\|Traceback" $f; done
