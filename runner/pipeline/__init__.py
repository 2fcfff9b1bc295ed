"""The stages run as one: ``stages`` (each kind of job as a stage: its verbs, and what its done
record must say before the next starts), ``record`` (the pipeline's status.json), ``supervisor``
(the detached process that takes the stages in order), ``control`` (the ``hsx-runner pipeline``
verbs). It asks each stage through the CLI's own verbs (``runner.cli``'s main: the supervisor imports it,
the CLI hands it to ``control``), so a stage is never run by another path."""
