# Sourced by scripts/test.sh and scripts/test-busy.sh: how the suite runs. Every real lane
# required (one that cannot start fails instead of skipping), and spread over two workers (the
# machine's two cores; HSX_TEST_WORKERS=0 runs in one process), a module each at a time, handed
# out costliest first (tests/costs.json, sorted by tests/conftest.py).
export HSX_REQUIRE_SSHD=1 HSX_REQUIRE_SGLANG_WHEEL=1 HSX_REQUIRE_SLURM=1 HSX_REQUIRE_SGLANG_CPU=1 HSX_REQUIRE_SPECFORGE=1 HSX_REQUIRE_SPECFORGE_TRAIN=1 HSX_REQUIRE_SYSTEMD=1
workers=${HSX_TEST_WORKERS:-2}
par=()
[ "$workers" = 0 ] || par=(-n "$workers" --dist loadfile --no-loadscope-reorder)
