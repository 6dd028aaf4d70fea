"""What every gRPC servicer of the daemon shares: its errors as status codes (`grpc_status`).

The servicers of `datasets`, `jobs` and `cluster` and the top-level ones import it; it imports
nothing of the daemon, so every part can stand on it.
"""
