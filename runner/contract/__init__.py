"""The contract every package shares: what crosses a process or machine boundary.

Imported by all four packages (runner, patches, remote, bot) and importing none of them. Stdlib
only, except ``ckpt`` (the sample file: torch), which only GPU-box code imports:

- ``status``: the status record, its phases, the one staleness rule; ``render``: its plain text
- ``errors``: the one error root, ``HsxError``
- ``config``: the config file's sections, parsed and checked
- ``atomic``: writes that readers never see torn
- ``dump``: server ↔ extractor (request body, temp dump, sidecar); ``launch``: the patched
  server's command line; ``ckpt``: the sample file SpecForge trains on
- ``ranks``: rank states and entries; ``replies``: exit codes and typed replies; ``timing``:
  every poll and wait, and the tests' short profile
"""
