"""graphtier.service: the daemon side and its data plane.

Sub-packages, one concept each: `graph` (in-memory graph types), `sources` (readers for
raw dataset formats), `hotness` (scores and reordering), `out_of_core` (memory budget, spill
files and the external sort of preparing under a budget), `prepared` (the on-disk prepared
dataset), `shm` (POSIX shared-memory segments), `placement` (tier budgets -> id boundaries),
`sampling` (neighbour sampling), `gather` (the tiered feature gather), `tiering` (the
tiering report). Nothing here does work at import time. The data plane imports only the
contract (`graphtier.contract`); the daemon (`daemon/`) and the launcher build on it.
"""
