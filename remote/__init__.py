"""Ops side's path to the GPU box: a transport (local or SSH through a jump host) and a
typed client that runs fixed ``hsx-runner`` verbs and parses their JSON."""
