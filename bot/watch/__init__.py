"""The watcher: each poll judged (the extraction's, the training's, the measurement's, the
regeneration's, the pipeline's; what the supervised kinds' judges share: ``supervised``),
milestones and alerts posted once (each an ``action``, an alert's Resume button with it), and
one pinned progress message (``pinned``) saying what "progress?" says of what runs now."""
