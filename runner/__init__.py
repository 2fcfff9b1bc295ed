"""GPU-box side of hsx (``hsx-runner``). What other packages may import from here is
``runner.contract`` alone (stdlib only); modules that import torch are imported lazily."""
