"""The job side of the contract: the spec a job is submitted with, its state, its view, the
progress its processes report, and their protobuf conversions. Torch-free."""
