"""The daemon's metrics: `registry.MetricsRegistry`, every metric in one prometheus registry.

The jobs' progress reports record into it, the status snapshot (`status/`) and `/metrics`
read from it; it imports nothing else of the daemon.
"""
