#!/usr/bin/env bash
# The wheel folder for the GPU test box, made on a networked machine:
#
#   bash launch/wheels.sh DIR        download into DIR the wheels of launch/gpu_wheels.txt, then check DIR
#
# The box (DESIGN.md, "The production path") has no package registry and lacks what launch/gpu_wheels.txt
# lists. This downloads exactly those lines, each --no-deps, as wheels for CPython 3.12 (the box's Python,
# whatever this machine runs; the one compiled build, pydantic-core, for x86-64 Linux), then
# `launch/gpu_env.py wheels DIR` checks the folder: pure-Python wheels (and that build)
# only, one per line of the list, every wheel's own dependencies on launch/gpu_image_packages.txt or in
# the folder (bfcl-eval's tree aside: installed --no-deps), under 64 MiB (what travels with the working
# tree). Put DIR under an ignored path (e.g. runs/wheels) or outside the tree; never commit it. On the box:
#   RCGRPO_WHEELS=DIR bash launch/gpu_check.sh      (or RCGRPO_WHEELS=DIR bash launch/setup_env.sh --gpu)
# PYTHON (default python3) runs pip; it need not be 3.12.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ $# -ne 1 ] || [ "${1#-}" != "$1" ]; then sed -n '2,13p' "${BASH_SOURCE[0]}"; exit 2; fi
DIR="$1"
PY="${PYTHON:-python3}"
mkdir -p "$DIR"
mapfile -t WANT < <("$PY" - "$ROOT/launch/gpu_env.py" "$ROOT/launch/gpu_wheels.txt" <<'PYEOF'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("gpu_env", sys.argv[1])
gpu_env = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_env)
for name, version in gpu_env.read_list(sys.argv[2]):
    print(("C " if name in gpu_env.COMPILED else "P ") + f"{name}=={version}")
PYEOF
)
[ "${#WANT[@]}" -gt 0 ] || { echo "wheels.sh: launch/gpu_wheels.txt lists nothing" >&2; exit 1; }
PURE=()
COMPILED=()
for w in "${WANT[@]}"; do
  if [ "${w%% *}" = C ]; then COMPILED+=("${w#* }"); else PURE+=("${w#* }"); fi
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation py \
  --dest "$DIR" "${PURE[@]}"
# gpu_env.COMPILED: the box's CPython 3.12 on x86-64 Linux
if [ "${#COMPILED[@]}" -gt 0 ]; then
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux2014_x86_64 --dest "$DIR" "${COMPILED[@]}"
fi
exec "$PY" "$ROOT/launch/gpu_env.py" wheels "$DIR"
