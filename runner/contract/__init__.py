"""The contract every package shares: what crosses a process or machine boundary.

Imported by all four packages (runner, patches, remote, bot) and importing none of them. Stdlib
only, with no exception (the sample file, which needs torch, is ``runner.codec``'s; the records'
plain text is ``runner.text``'s):

- ``status``: the status record, its phases, the one staleness rule; ``fields``: each field
  checked as it is read
- ``train``: the training's record; ``train_history``: its curve; ``measure``: the draft's
  measurement, its record and its settings
- ``errors``: the one error root, ``HsxError``; ``checks``: a preflight check and a refusal
  made of the failed ones, for every kind
- ``config``: the config file's sections, parsed and checked
- ``atomic``: writes that readers never see torn, and the tolerant readers of JSON files
- ``dump``: server ↔ extractor (request body, temp dump, sidecar); ``launch``: the patched
  server's command line
- ``ranks``: rank states and entries; ``replies``: exit codes and typed replies; ``timing``:
  every poll and wait, and the tests' short profile; ``stdout``: a CLI whose reader went away
"""
