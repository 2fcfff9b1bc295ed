# Sourced by scripts/test.sh and scripts/test-busy.sh: how pytest spreads the suite. Two workers
# (the machine's two cores; HSX_TEST_WORKERS=0 runs in one process), a module each at a time,
# handed out costliest first (tests/costs.json, sorted by tests/conftest.py).
workers=${HSX_TEST_WORKERS:-2}
par=()
[ "$workers" = 0 ] || par=(-n "$workers" --dist loadfile --no-loadscope-reorder)
