"""`/v1/status` served from a serialized snapshot rebuilt off the request path.

Building the snapshot walks every job, rank and counter and validates a large pydantic model,
which with many jobs on a busy machine is too slow to pay inside each request. The
cache keeps the JSON bytes of the latest snapshot; while someone polls, a refresher thread
rebuilds them every `max_age_s / 2`, so a request only copies bytes. The first request after a quiet
spell (no refresher running) rebuilds a snapshot older than `max_age_s` itself; every snapshot's
`time` field says when it was taken.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pydantic import BaseModel

log = logging.getLogger("graphtierd")


class StatusCache:
    """The latest snapshot of `build()` as JSON bytes, for the handler (`json()`).

    The refresher thread runs only while requests come: it starts with the first one after a
    quiet spell and ends `idle_after_s` after the last, so an unpolled daemon spends nothing.
    """

    def __init__(self, build: Callable[[], BaseModel], *, max_age_s: float = 0.5, idle_after_s: float = 10.0) -> None:
        self._build = build
        self.max_age_s, self.idle_after_s = max_age_s, idle_after_s
        self._lock = threading.Lock()  # one build at a time
        self._body: bytes | None = None
        self._built_at = 0.0
        self._last_request = 0.0
        self._refresher: threading.Thread | None = None

    def _rebuild(self) -> bytes:
        with self._lock:
            if self._body is not None and time.monotonic() - self._built_at < self.max_age_s / 2:
                return self._body  # another caller just built it
            body = self._build().model_dump_json().encode()
            self._body, self._built_at = body, time.monotonic()
            return body

    def json(self) -> bytes:
        """The snapshot's JSON: at most `max_age_s` old when the refresher starts; while it runs, the
        latest it built (it rebuilds every `max_age_s / 2`; a machine short of cores may delay it)."""
        now = self._last_request = time.monotonic()
        refresher = self._refresher
        running = refresher is not None and refresher.is_alive()
        if not running:
            self._refresher = threading.Thread(target=self._refresh, name="graphtier-status", daemon=True)
            self._refresher.start()
        body = self._body
        if body is None or (not running and now - self._built_at > self.max_age_s):
            body = self._rebuild()
        return body

    def _refresh(self) -> None:
        while time.monotonic() - self._last_request < self.idle_after_s:
            started = time.monotonic()
            try:
                self._rebuild()
            except Exception:  # a request rebuilds and reports it; the refresher must live on
                log.exception("rebuilding the status snapshot failed")
            time.sleep(max(0.0, self.max_age_s / 2 - (time.monotonic() - started)))
