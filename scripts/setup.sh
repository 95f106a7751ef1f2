#!/usr/bin/env bash
# Set up fedssl on a fresh machine: Fashion-MNIST (Debian package, when root), a virtualenv in
# .venv with pinned torch/torchvision and the project installed in editable mode. Idempotent: a
# second call only checks a stamp and returns.
set -euo pipefail
cd "$(dirname "$0")/.."

FMNIST=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
if [ ! -f "$FMNIST" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing Fashion-MNIST (apt-get install dataset-fashion-mnist)" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null
  else
    echo "setup: Fashion-MNIST not found; as root run: apt-get install dataset-fashion-mnist" >&2
    echo "       (or put the four idx .gz files in a folder and set dataset.root)" >&2
  fi
fi

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -m ensurepip --version >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing python3-venv (the venv module needs ensurepip)" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
fi
# a venv whose creation failed half-way (no pip: ensurepip missing) is made again
[ -x .venv/bin/pip ] || { rm -rf .venv; "$PYTHON" -m venv .venv; }
stamp=.venv/.fedssl-installed
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing dependencies into .venv (first time: a few minutes)" >&2
  .venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]'
  echo "$want" > "$stamp"
fi
