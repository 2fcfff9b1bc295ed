"""Training the EAGLE-3 draft with SpecForge 0.2.0's own trainer on the job's output.

Owns the training run directory (beside the output, never inside it: SpecForge trains on every
``.ckpt`` below ``hidden_states_path``): ``runspec`` (run.yaml, the draft config and the target
view from the job's facts, command.json), ``split`` (the held-out eval samples), ``progress``
(step and eval lines, complete checkpoints), ``record`` (the run's status.json), ``history``
(its curve, history.jsonl), ``supervisor`` (the detached process that runs and watches one
trainer launch), ``control`` (the ``hsx-runner train`` verbs).

Imports the contract, ``output`` (the lock, dataset.json's name), ``runner.procs`` (the trainer
dies with its supervisor) and ``runner.specforge_cpu`` (the CPU lane's venv and shims);
SpecForge itself runs only in its own interpreter, ``[train] python``, never imported here.
"""
