"""GPU-box side of hsx (``hsx-runner``), by stage, each rung importing only those below it:
``contract`` (what crosses a boundary; stdlib only), ``codec`` (the sample file and its bytes;
torch, xxhash, ISA-L), ``text`` (the records' plain text), ``data`` (the input), ``output`` (the
output directory), ``serve`` (the target server), ``job`` (one run), ``train`` (the draft, by
SpecForge), ``engines`` (local or Slurm), and ``cli`` on top. ``lanes``, ``sglang_cpu`` and
``specforge_cpu`` (the CPU lanes' venvs), ``procs`` and ``ports`` are leaves any of them may use. What other packages may
import from here is ``runner.contract``, with ``runner.text`` for bot and remote and
``runner.codec`` for the patch; modules that import torch are imported lazily."""
