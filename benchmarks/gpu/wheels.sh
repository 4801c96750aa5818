#!/usr/bin/env bash
# The wheels the GPU check needs beside what the lent machine has (JAX, pandas, scipy,
# tensorboard, h5py, rich, PyYAML, tqdm...; no Keras, no Optuna, no TensorFlow), for its
# Python 3.12 on x86-64, and precsearch's own wheel, into .whl/ (ignored by git). See
# benchmarks/gpu/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .whl && mkdir -p .whl
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux1_x86_64)
versions=$(.venv/bin/python - <<'PY'
from importlib.metadata import version
names = ["keras", "optuna", "namex", "optree", "plotly", "alembic", "sqlalchemy", "mako",
         "colorlog", "greenlet"]
print(" ".join(f"{n}=={version(n)}" for n in names))
PY
)
for spec in $versions; do
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${platforms[@]}" -d .whl "$spec"
done
# precsearch itself, as a wheel: its built-in plugins are entry points, which only an
# installed distribution has (build it again after changing the code).
.venv/bin/pip wheel --quiet --no-deps --no-build-isolation -w .whl . && rm -rf build
du -sh .whl
