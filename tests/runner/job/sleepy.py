"""A supervisor that only holds its run's lock until SIGTERM (``python -m tests.runner.job.sleepy
RUN_DIR CONFIG``): what test_launch races two launches against."""

import os
import signal
import sys
import time

from runner.output.lock import JobLock

if __name__ == "__main__":
    lock = JobLock(os.path.join(os.path.abspath(sys.argv[1]), ".lock"))
    lock.acquire()  # LockedError, exit 1: another supervisor holds the run
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    time.sleep(120)
