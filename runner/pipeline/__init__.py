"""The stages run as one: ``stages`` (each kind of job as a stage: its verbs, and what its done
record must say before the next starts), ``record`` (the pipeline's status.json), ``supervisor``
(the detached process that takes the stages in order), ``control`` (the ``hsx-runner pipeline``
verbs). It asks each stage through the CLI's own verbs, so it imports only the contract, the job's
supervised mechanics and ``runner.cli`` (lazily)."""
