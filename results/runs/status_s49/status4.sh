#!/bin/bash
# fedsc/fmnist_full on seed 177 (results/regime.md, forty-ninth session); started only before 05:35.
cd /work/exp49
now=$(date +%H%M); if [ "$now" \> "0534" ]; then echo "$(date +%T) cut-off: not started"; exit 0; fi
out=status_fedsc_fmnist_full_s177
rm -f /tmp/ray/ray_current_cluster
echo "$(date +%T) start $out at $(git rev-parse --short HEAD)"
PYTHONPATH=/work/exp49 /work/main/.venv/bin/python -m simulator.cli run scenarios/fedsc/fmnist_full.yaml --set seed=177 --out /work/runs/s49/$out --quiet > /work/runs/s49/$out.log 2>&1
echo "$(date +%T) end $out rc=$?"
