"""The stages run as one: ``stages`` (each kind of job as a stage: what its done record must say
before the next starts), ``record`` (the pipeline's status.json), ``supervisor`` (the detached
process that takes the stages in order), ``control`` (the ``hsx-runner pipeline`` verbs). It
asks each stage through ``runner.kinds``, in its own process and typed, as the CLI's verbs do, so
a stage is never run by another path. The top rung: imports the contract, the text, the job's
supervision and kinds; only the CLI imports it."""
