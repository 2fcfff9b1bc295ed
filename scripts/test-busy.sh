#!/usr/bin/env bash
# The suite on a busy machine, as a shared box or a laptop is: two CPU-bound processes beside it
# and, with --sglang, a second real SGLang server extracting on the CPU lane. Run it before a
# change that touches timing (a wait, a bound, a poll); each run names its failures (-rf).
#   bash scripts/test-busy.sh [--runs N] [--sglang] [PYTEST ARGS...]
#   bash scripts/test-busy.sh --runs 10 -m "not slow" -x     # the fast lane, ten times
#   bash scripts/test-busy.sh --runs 2 --sglang              # the whole suite, twice
# Run as scripts/test.sh runs the suite (scripts/suite.sh: the lanes required, three workers).
# Needs the machine set up by scripts/test.sh first (its venv, .cache's lanes).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=1
sglang=0
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --sglang) sglang=1; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

hogs=()
tmp=""
cleanup() {
  [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null || true
  if [ -n "$tmp" ]; then
    .venv/bin/hsx-runner stop --config "$tmp/demo/hsx.toml" >/dev/null 2>&1 || true
    [ -n "${demo:-}" ] && kill "$demo" 2>/dev/null || true
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT

for _ in 1 2; do
  .venv/bin/python -c "while True: pass" &
  hogs+=($!)
done
if [ "$sglang" = 1 ]; then
  tmp=$(mktemp -d)
  # a real SGLang server on the CPU lane, extracting far longer than the runs take
  .venv/bin/hsx demo --backend sglang --headless --samples 100000 --workdir "$tmp/demo" >"$tmp/demo.log" 2>&1 &
  demo=$!
fi

source scripts/suite.sh   # as scripts/test.sh runs it
failed=0
for r in $(seq "$runs"); do
  echo "== busy run $r/$runs: pytest ${par[*]:-} ${args[*]:-}"
  if ! .venv/bin/python -m pytest -q -p no:cacheprovider -rf "${par[@]}" "${args[@]}"; then
    failed=$((failed + 1))
  fi
done
echo "== $((runs - failed)) of $runs busy runs passed"
[ "$failed" = 0 ]
