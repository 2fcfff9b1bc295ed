"""The GPU box's check of the dump patch, in one place: ``run`` (the servers, the models, the
report; ``python -m bench.gpu_check``) and ``judge`` (what is checked and the verdict, no GPU needed)."""
