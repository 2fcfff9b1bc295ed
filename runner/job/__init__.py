"""One run of the job: the phase sequence, the extractor, the recorder that writes the status record,
the disk guard, preflight (``patch_check``: the SGLang patch's hook points, checked once per
install), background verbs and the view the engines answer from; what every
supervised kind shares (``supervised``: its run dir, lock, record, launch and stop; ``served``: the
server it asks, brought up and restarted). Imports the contract, data, output and serve."""
