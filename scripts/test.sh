#!/usr/bin/env bash
# Set up a fresh machine and run every test: sshd for the SSH tests, a venv with the CPU
# torch wheel, the pinned SGLang wheel (source only, for the patch's compatibility test).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null
  else
    echo "scripts/test.sh: openssh-server is needed for the SSH tests (apt-get install openssh-server)" >&2
    exit 1
  fi
fi

# A real single-node Slurm for tests/cluster (started and stopped by the tests themselves).
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
  else
    echo "scripts/test.sh: slurm-wlm and munge are needed for the cluster tests (apt-get install slurm-wlm munge)" >&2
    exit 1
  fi
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q torch==2.13.0            # the CPU wheel; the range in pyproject then installs nothing more
.venv/bin/pip install -q -e '.[runner,bot,dev]'
[ -n "$(ls .cache/sglang/sglang-0.5.23-*.whl 2>/dev/null)" ] ||
  .venv/bin/pip download -q --no-deps sglang==0.5.23 -d .cache/sglang

.venv/bin/ruff check .
.venv/bin/ruff format --check .
export HSX_REQUIRE_SSHD=1 HSX_REQUIRE_SGLANG_WHEEL=1 HSX_REQUIRE_SLURM=1
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
