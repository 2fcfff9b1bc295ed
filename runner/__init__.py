"""GPU-box side of hsx (``hsx-runner``), by stage, each rung importing only those below it:
``contract`` (what crosses a boundary; stdlib only), ``codec`` (the sample file and its bytes;
torch, xxhash, ISA-L), ``data`` (the input), ``output`` (the output directory), ``serve`` (the
target server), ``job`` (one run), ``train`` (the draft, by SpecForge), ``engines`` (local or
Slurm), and ``cli`` on top. ``lanes``, ``sglang_cpu`` and ``specforge_cpu`` (the CPU lanes'
venvs) are leaves any of them may use. What other packages may import from here is
``runner.contract``, and for the patch ``runner.codec``; modules that import torch are imported
lazily."""
