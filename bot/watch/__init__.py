"""The watcher: each poll judged (the extraction's, the training's, the measurement's, the
regeneration's, the pipeline's), milestones and alerts posted once."""
