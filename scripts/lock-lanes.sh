#!/usr/bin/env bash
# Write the trainer venvs' locks (runner/assets/specforge-*.lock): every package pinned, with
# the sha256 of each file the registry has for that version, so a build installs nothing else.
# Run it to move a pin; a changed lock builds a new venv. Resolved by uv (a temporary venv),
# installed by pip --require-hashes --only-binary :all: (runner/lanes.py).
#   bash scripts/lock-lanes.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/uv"
"$tmp/uv/bin/pip" install -q uv==0.13.8
compile() { "$tmp/uv/bin/uv" pip compile --quiet --no-header --generate-hashes --python-version 3.11 "$@"; }

# A GPU box: specforge with the wheel's own pins (torch 2.11 and its CUDA wheels, sglang 0.5.14),
# for every platform at once (markers), since the box's is not known here.
echo "specforge==0.2.0" >"$tmp/gpu.in"
{
  echo "# The SpecForge training lane on a GPU box (runner/specforge_gpu.py): specforge==0.2.0 with"
  echo "# the wheel's own pins, every file's hash. Written by scripts/lock-lanes.sh; a change builds anew."
  compile --universal "$tmp/gpu.in"
} >runner/assets/specforge-gpu.lock

# The CPU lane: specforge itself (its CUDA pins left out: it runs on the machine's CPU torch,
# installed first by version) and the lane's needs, resolved against the CPU torch wheel.
echo "specforge==0.2.0" >"$tmp/sf.in"
grep -v '^#' runner/assets/specforge-cpu.txt | grep . >"$tmp/cpu.in"
torch=$(sed -n 's/^#@torch //p' runner/assets/specforge-cpu.txt)
echo "$torch+cpu" >"$tmp/torch.txt"  # the CPU build's own deps, none of the CUDA wheels'
links=()
[ -d /opt/wheels ] && links=(--find-links /opt/wheels)  # where this machine keeps its CPU torch wheel
{
  echo "# The SpecForge training lane on a CPU (runner/specforge_cpu.py): specforge==0.2.0 without its"
  echo "# deps, and the lane's needs (specforge-cpu.txt) resolved on $torch, every file's hash."
  echo "# Written by scripts/lock-lanes.sh; a change builds anew."
  compile --no-deps "$tmp/sf.in"
  compile --universal "${links[@]}" -c "$tmp/torch.txt" --no-emit-package torch "$tmp/cpu.in"
} >runner/assets/specforge-cpu.lock
echo "locked: $(grep -c '^[A-Za-z]' runner/assets/specforge-gpu.lock) packages for a GPU box," \
  "$(grep -c '^[A-Za-z]' runner/assets/specforge-cpu.lock) for the CPU lane"
