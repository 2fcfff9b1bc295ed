"""GPU-box side of hsx (``hsx-runner``), by stage, each rung importing only those below it:
``contract`` (what crosses a boundary; stdlib only), ``data`` (the input), ``output`` (the output
directory), ``serve`` (the target server), ``job`` (one run), ``engines`` (local or Slurm), and
``cli`` on top. ``sglang_cpu`` (the CPU lane) is a leaf any of them may use. What other packages
may import from here is ``runner.contract`` alone; modules that import torch are imported lazily."""
