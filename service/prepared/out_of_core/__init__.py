"""Preparation under a memory budget (`prepare_out_of_core` in `pipeline`): the memory plan
(`budget`), spill files (`spill`), the CSC by a counting sort (`external_sort`, its passes in
`csc_passes`), the permutation by bucketed scatter (`external_permute`) and buffers faulted in
ahead of use (`prefault`). Nothing is imported here: a source that only needs the memory plan
does not pull in the pipeline."""
