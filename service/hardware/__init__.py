"""What the machine offers the data path, checked rather than assumed, and what NVML measured.

- `doctor`: `build_report()` -> `MachineReport` (CUDA devices, host registration, peer access,
  NVLink, MPS, NVML counters, transparent huge pages, /dev/shm); `graphtier doctor` prints it.
- `machine`: the daemon's copy, computed at start without initialising CUDA in the daemon.
- `probe`: the checks that do initialise CUDA, runnable as `python -m graphtier.service.hardware.probe`.
- `nvml`, `nvml_collector`: NVML access and the daemon's sampler of PCIe/NVLink byte counters.
- `host`: huge pages, /dev/shm and the MPS control daemon, read from the file system.

The report's types (`MachineReport`, `MeasuredTraffic`, ...) are the contract's
(`graphtier.contract.machine`): `/v1/status` carries them to clients.
"""
