"""The GPU data path: CUDA runtime access, host memory registered for zero-copy reads, device
tiers the daemon allocates and shares as CUDA IPC handles, and the one-launch tiered gather.

Nothing here touches CUDA at import time; every entry point says why it cannot run (no
driver, no device, torch without CUDA) instead of failing obscurely. See DESIGN.md, "The GPU path".
"""
