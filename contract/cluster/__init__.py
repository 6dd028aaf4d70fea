"""The cluster side of the contract: nodes, their datasets and load, and their protobuf
conversions. Torch-free."""
