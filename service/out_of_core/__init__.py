"""Working under a memory budget: the building blocks of preparing a graph larger than memory.

The memory plan (`budget`), spill files (`spill`), the CSC by a counting sort
(`external_sort`, its passes in `csc_passes`) and buffers faulted in ahead of use
(`prefault`). The sources stream into them, hotness scores over their on-disk CSC, and
`prepared.out_of_core` composes them into the bounded preparation path. Nothing is imported
here: a source that only needs the memory plan does not pull in the rest."""
