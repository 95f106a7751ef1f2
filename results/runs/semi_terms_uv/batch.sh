#!/bin/bash
while ! grep -q "^rc=" /work/runs/s45/ci.log; do sleep 15; done
cd /work/exp45b
echo "start $(date +%H:%M:%S) at $(git rev-parse --short HEAD)"
/work/main/.venv/bin/fedssl claim results/runs/semi_terms_uv/suite.yaml --runs-dir /work/runs/s45/terms_uv --until 16:12 > /work/runs/s45/claim_uv.out 2> /work/runs/s45/claim_uv.err
rc=$?
echo "end $(date +%H:%M:%S) rc=$rc"
