#!/usr/bin/env bash
# fifty-fourth session: results/orchestra.md "RotPred alone as a row of the 40-round claim"
set -u
cd /work/exp54b
export PYTHONPATH=/work/exp54b
rm -f /tmp/ray/ray_current_cluster
echo "start $(date)"
/work/main/.venv/bin/fedssl claim claims/orchestra.yaml --until 19:05
echo "claim rc=$? $(date)"
