"""The sample file SpecForge trains on and its bytes: ``ckpt`` (the `.ckpt` / `.ckpt.gz` file,
written and loaded), ``sink`` (chunks hashed, gzip, the stored checksum, ``recode``) and
``precision`` (bf16 rounded to fewer mantissa bits).

GPU-box only: imports the contract, the standard library, torch, xxhash and ISA-L. An ops-side
reader (bot, remote) must never import it.
"""
