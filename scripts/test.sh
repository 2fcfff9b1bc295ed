#!/usr/bin/env bash
# Set up a fresh machine and run every test: sshd for the SSH tests, a venv with the CPU
# torch wheel, the pinned SGLang wheel (source, for the patch's compatibility test), and the
# SGLang CPU lane: a second venv with the real pinned SGLang, cached under .cache/ by its pins.
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages: sshd for the SSH tests, a real single-node Slurm (slurm-wlm, munge) for
# tests/cluster, systemd's unit parser for deploy's unit; the tests start and stop the daemons themselves.
missing=()
[ -x /usr/sbin/sshd ] || command -v sshd >/dev/null 2>&1 || missing+=(openssh-server)
{ [ -x /usr/sbin/slurmctld ] || command -v slurmctld >/dev/null 2>&1; } || missing+=(slurm-wlm)
{ [ -x /usr/sbin/munged ] || command -v munged >/dev/null 2>&1; } || missing+=(munge)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)   # its unit parser checks deploy's unit
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "scripts/test.sh: as root, or install first: apt-get install ${missing[*]}" >&2
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
[ -n "$(ls .cache/specforge/specforge-0.2.0-*.whl 2>/dev/null)" ] ||   # its offline reader reads our outputs
  .venv/bin/pip download -q --no-deps specforge==0.2.0 -d .cache/specforge

.venv/bin/python -m runner.sglang_cpu .cache >/dev/null   # several minutes the first time
.venv/bin/python -m runner.specforge_cpu .cache >/dev/null   # SpecForge's trainer on this CPU: a minute or two

.venv/bin/ruff check .
.venv/bin/ruff format --check .
# The real lanes required, the suite spread over both cores (scripts/suite.sh); each module's wall
# and CPU time printed at the end (tests/times.py), and the slowest tests named.
source scripts/suite.sh
.venv/bin/python -m pytest -q -p no:cacheprovider "${par[@]}" --times=.cache/test-times.jsonl --durations=25 "$@"
