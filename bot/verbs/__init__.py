"""The verbs every surface runs: the kinds table, the one parser, the one gate, audit and dispatch,
each kind's verbs (the pipeline's among them, what the supervised kinds' share in ``kind``), who may ask from where and how often."""
