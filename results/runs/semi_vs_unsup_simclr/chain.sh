#!/usr/bin/env bash
while kill -0 18374 2>/dev/null; do sleep 5; done
echo "$(date +%T) batch 1 ended" >> /work/runs/s44/chain.log
cd /work/exp44b && echo "$(date +%T) batch 2 starts" >> /work/runs/s44/chain.log
/work/main/.venv/bin/fedssl claim results/runs/semi_vs_unsup_simclr/suite.yaml --runs-dir /work/runs/s44/semi_simclr --until 12:55 > /work/runs/s44/semi_simclr.out 2>&1
rc=$?
echo "$(date +%T) batch 2 ended rc=$rc" >> /work/runs/s44/chain.log
