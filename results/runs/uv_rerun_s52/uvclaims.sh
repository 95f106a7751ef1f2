#!/bin/bash
# The two UV suites at current code, runs kept (results/uv.md, fifty-second session); cut-off --until 14:10.
cd /work/exp52
echo "$(date +%T) uv claims at $(git rev-parse --short HEAD)"
for suite in uv_label_skew uv_covariate_shift; do
  rm -f /tmp/ray/ray_current_cluster
  echo "$(date +%T) start $suite"
  PYTHONPATH=/work/exp52 /work/main/.venv/bin/python -m simulator.cli claim claims/$suite.yaml --until 14:10 > /work/runs/s52/$suite.out 2> /work/runs/s52/$suite.err
  echo "$(date +%T) end $suite rc=$?"
done
echo "$(date +%T) done"
