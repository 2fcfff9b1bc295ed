"""GPU-box side of hsx. Modules that import torch are imported lazily by the CLI, so the
ops side can use the records (status, config, dump contract) without torch."""
