"""The input: dataset rows and their loss masks, lengths, layer ids, the real families' tiny shapes
and the demo's assets. Imports only the contract (the lowest rung of runner's stages)."""
