"""One run of the job: the phase sequence, the extractor, the recorder that writes the status record,
the disk guard, preflight, background verbs and the view the engines answer from. Imports the
contract, data, output and serve."""
