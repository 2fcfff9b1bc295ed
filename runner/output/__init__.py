"""The output directory: the store (layout, manifest, plan, pinning) and its line files, the ranks'
files, the job's lock, verify, adopt and compact. Imports the contract and data."""
