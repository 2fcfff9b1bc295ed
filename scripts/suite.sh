# Sourced by scripts/test.sh and scripts/test-busy.sh: how the suite runs. Every real lane
# required (one that cannot start fails instead of skipping), and spread over three workers on the
# machine's two cores (HSX_TEST_WORKERS=0 runs in one process), a module each at a time, handed
# out costliest first (tests/costs.json, sorted by tests/conftest.py). Two workers left both cores
# idle 14% of the run (servers, trainers and daemons waited on); a third fills those gaps: 1,046 s
# against 1,262 s for the same commit, at most 5.8 GB in use (tests/README.md).
export HSX_REQUIRE_SSHD=1 HSX_REQUIRE_SGLANG_WHEEL=1 HSX_REQUIRE_SLURM=1 HSX_REQUIRE_SGLANG_CPU=1 HSX_REQUIRE_SPECFORGE=1 HSX_REQUIRE_SPECFORGE_TRAIN=1 HSX_REQUIRE_SYSTEMD=1
workers=${HSX_TEST_WORKERS:-3}
par=()
[ "$workers" = 0 ] || par=(-n "$workers" --dist loadfile --no-loadscope-reorder)
