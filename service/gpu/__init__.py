"""The GPU data path: CUDA runtime access, host memory registered for zero-copy reads, CUDA
views of raw device addresses, the one-launch tiered gather and the GPU sampler. Device memory
is allocated and shared through graphtier.service.memory; the dataset's device tiers are in
graphtier.service.store.device_tiers.

Nothing here touches CUDA at import time; every entry point says why it cannot run (no
driver, no device, torch without CUDA) instead of failing obscurely. See DESIGN.md, "The GPU path".
"""
