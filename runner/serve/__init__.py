"""The target server: its lifecycle, restarts and which rank died, the reference backend, the shared
memory a dead server leaves, GPUs, the dump self-test, the plain SGLang's command line (the
target alone or with the draft). Imports the contract, data and output (where
a run keeps its logs and pid files), and the CPU lane (``runner.sglang_cpu``)."""
