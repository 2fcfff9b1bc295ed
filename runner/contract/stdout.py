"""A CLI whose reader went away (``hsx-runner events | head``) ends as Unix tools do: quietly,
with the code a shell gives a tool killed by SIGPIPE. Python ignores SIGPIPE, so without this
the write raises and a traceback lands on stderr."""

from __future__ import annotations

import functools
import os
import sys

CLOSED_STDOUT = 128 + 13  # 128 + SIGPIPE


def quiet_when_stdout_closes(main):
    @functools.wraps(main)
    def wrapped(*args, **kwargs):
        try:
            try:
                return main(*args, **kwargs)
            finally:
                sys.stdout.flush()  # here, not at exit, where the error could not be caught
        except BrokenPipeError:
            # What is still buffered must not raise again when the interpreter flushes at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return CLOSED_STDOUT

    return wrapped
