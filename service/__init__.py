"""graphtier.service: the daemon side and its data plane.

Sub-packages, one concept each: `graph` (in-memory graph types), `sources` (readers for
raw dataset formats), `hotness` (scores and reordering), `prepared` (the on-disk prepared
dataset), `shm` (POSIX shared-memory segments), `placement` (tier budgets -> id boundaries),
`sampling` (neighbour sampling), `gather` (the tiered feature gather), `tiering` (the
tiering report). Nothing here does work at import time.
"""
