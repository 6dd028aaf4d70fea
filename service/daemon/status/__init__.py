"""What a daemon reports: the `/v1/status` snapshot and the live page, read from the metrics
registry (`daemon.metrics`) and the daemon's live state.

- `builder`: `StatusBuilder`, the `/v1/status` snapshot from the registry and live state.
- `cache`: the snapshot cache that keeps `/v1/status` cheap under many jobs.
- `app`: the FastAPI app (`/v1/status`, `/metrics`, the live page).
- `dashboard`: the live page itself.
"""
