"""The contract every package shares: what crosses a process or machine boundary.

Imported by all four packages (runner, patches, remote, bot) and importing none of them. Stdlib
only, except the sample file and its bytes (``ckpt``: torch; ``sink``: xxhash and ISA-L;
``precision``: torch), which only GPU-box code imports:

- ``status``: the status record, its phases, the one staleness rule; ``render``: its plain text;
  ``fields``: each field checked as it is read
- ``train``: the training's record and its plain text; ``train_history``: its curve
- ``errors``: the one error root, ``HsxError``
- ``config``: the config file's sections, parsed and checked
- ``atomic``: writes that readers never see torn, and the tolerant readers of JSON files
- ``dump``: server ↔ extractor (request body, temp dump, sidecar); ``launch``: the patched
  server's command line; ``ckpt``: the sample file SpecForge trains on, written through
  ``sink`` (chunks hashed, gzip), its bf16 rounded by ``precision``
- ``ranks``: rank states and entries; ``replies``: exit codes and typed replies; ``timing``:
  every poll and wait, and the tests' short profile; ``stdout``: a CLI whose reader went away
"""
