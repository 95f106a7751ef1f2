#!/bin/bash
# Thirtieth session: results/regime.md, section "The joint-shift SimSiam `_semi10` pair with the
# paper's batch and colour jitter 0.8"; worktree at f0e29cc. Stops at the first miss (the rule).
cd /work/exp30
ARM="--set training.batch_size=128 --set augment.brightness=0.8 --set augment.contrast=0.8"
run() { # out scenario seed
  local out=$1 scen=$2 seed=$3
  if [ "$(date +%H%M)" \> "1545" ]; then echo "$(date +%T) cut-off: $out not started"; exit 0; fi
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $out"
  PYTHONPATH=/work/exp30 /work/main/.venv/bin/python -m simulator.cli run scenarios/uv/$scen.yaml --set seed=$seed $ARM --out /work/runs/s30/$out --quiet > /work/runs/s30/$out.log 2>&1
  echo "$(date +%T) end $out rc=$?"
  /work/main/.venv/bin/python - /work/runs/s30/$out <<'PY' || { echo "$(date +%T) miss: batch stops"; exit 0; }
import json, sys
j = json.load(open(sys.argv[1] + "/summary.json"))
k = 100 * (j["final"]["knn_top1"] - j["initial"]["knn_top1"]); p = 100 * (j["final"]["linear_top1"] - j["initial"]["linear_top1"])
print(f"kNN {k:+.2f} probe {p:+.2f}")
sys.exit(0 if k >= 2 and p >= 4 else 1)
PY
}
run jss_BG_s102 fmnist_joint_shift_simsiam_semi10 102
run jssuv_BG_s102 fmnist_joint_shift_simsiam_uv_semi10 102
run jss_BG_s101 fmnist_joint_shift_simsiam_semi10 101
run jssuv_BG_s100 fmnist_joint_shift_simsiam_uv_semi10 100
run jss_BG_s100 fmnist_joint_shift_simsiam_semi10 100
run jssuv_BG_s101 fmnist_joint_shift_simsiam_uv_semi10 101
run jss_BG_s115 fmnist_joint_shift_simsiam_semi10 115
run jssuv_BG_s115 fmnist_joint_shift_simsiam_uv_semi10 115
echo done
