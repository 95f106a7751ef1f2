#!/bin/bash
# The session's third device call: the Ray engine on the GPU (results/runs/gpu_s24/ray_gpu.py as of
# 741e7dd; folded since into `python3 -m analysis.gpu_benchmark --parts engines`).
# Carry .raycarry (a trimmed Ray 2.60 wheel for Python 3.12, without its Java, RLlib, Tune, Train,
# Serve, Data and dashboard front-end, as tar.xz; and the wheels of its dependencies, of which only
# the missing ones are installed). Results under $OUT.
set -u
began=$SECONDS
mkdir -p /tmp/site && tar -xJf .raycarry/ray_core.tar.xz -C /tmp/site || exit 1
missing=$(python3 - <<'PY'
import importlib.util
need = {"click": "click", "jsonschema": "jsonschema", "msgpack": "msgpack", "google.protobuf": "protobuf",
        "requests": "requests", "yaml": "pyyaml", "filelock": "filelock", "packaging": "packaging",
        "attrs": "attrs", "referencing": "referencing", "rpds": "rpds_py",
        "jsonschema_specifications": "jsonschema_specifications", "urllib3": "urllib3", "idna": "idna",
        "certifi": "certifi", "charset_normalizer": "charset_normalizer", "typing_extensions": "typing_extensions"}
print(" ".join(w for m, w in need.items() if importlib.util.find_spec(m) is None))
PY
)
echo "installing: $missing"
for w in $missing; do python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .raycarry/deps/$w-*.whl || exit 1; done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import ray; print('ray', ray.__version__)" || exit 1
echo "set up after $((SECONDS - began)) s"
timeout 240 python3 results/runs/gpu_s24/ray_gpu.py --out "$OUT/ray_gpu.json" > "$OUT/ray_gpu.log" 2>&1
echo "rc=$? after $((SECONDS - began)) s"
grep "^{" "$OUT/ray_gpu.log"; grep -i "error\|Traceback" "$OUT/ray_gpu.log" | head -20
