#!/bin/bash
cd /work/exp45
echo "start $(date +%H:%M:%S) at $(git rev-parse --short HEAD)"
/work/main/.venv/bin/fedssl claim results/runs/semi_terms/suite.yaml --runs-dir /work/runs/s45/terms --until 15:35 > /work/runs/s45/claim.out 2> /work/runs/s45/claim.err
rc=$?
echo "end $(date +%H:%M:%S) rc=$rc"
