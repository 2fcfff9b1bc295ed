"""The watcher: each poll judged (the extraction's, the training's, the measurement's, the
regeneration's, the pipeline's; what the supervised kinds' judges share: ``supervised``),
milestones and alerts posted once, and one pinned progress message (``pinned``) saying what
"progress?" says of what runs now."""
