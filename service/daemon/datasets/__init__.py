"""The datasets a daemon serves: one shared-memory copy of each per machine.

- `registry`: `DatasetRegistry`, loading, sharing and unloading prepared datasets.
- `lifetime`: a loaded copy's version, idle unloading and the shared-memory budget.
- `gpu_placement`: where a loaded dataset's device tiers go on this machine.
"""
