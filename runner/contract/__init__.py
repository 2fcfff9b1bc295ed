"""The contract every package shares: what crosses a process or machine boundary.

Stdlib only, imported by all four packages (runner, patches, remote, bot) and importing none of
them: the status record and its renderer, typed replies and exit codes, the one error root, the
config sections, atomic writes, the dump contract between the server and the extractor, and
the polls and waits every side runs on (timing).
"""
