"""The watcher: each poll judged (the extraction's, the training's), milestones and alerts posted once."""
