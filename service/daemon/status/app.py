"""The status app (FastAPI): `/healthz`, `/v1/status`, `/v1/jobs/{id}/history`, `/metrics` and the dashboard at `/`.

It only reads: the status snapshot comes from `StatusBuilder` through `StatusCache` (its
JSON, rebuilt off the request path: a request copies bytes, it does not walk every job),
`/metrics` is the exposition of the daemon's one `MetricsRegistry`. The interactive API docs
are off because they load scripts from a CDN.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

from fastapi import FastAPI, Response
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel

from graphtier.contract.errors import UnknownJobError
from graphtier.contract.jobs.history import EpochRecord
from graphtier.contract.status import DaemonStatus
from graphtier.service.daemon.metrics.registry import MetricsRegistry
from graphtier.service.daemon.status.cache import StatusCache
from graphtier.service.daemon.status.dashboard import DASHBOARD_HTML


class Health(BaseModel):
    """The body of /healthz."""

    status: Literal["serving", "not_serving"]
    pid: int


def _finite(value: Any) -> Any:
    """`value` with NaN and infinite figures (a diverged epoch's loss) as null: JSON has no such numbers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    return value


def create_status_app(
    *,
    status: Callable[[], DaemonStatus],
    metrics: MetricsRegistry,
    serving: Callable[[], bool],
    pid: int,
    history: Callable[[str], list[EpochRecord]] | None = None,
) -> FastAPI:
    """The app; `status()` builds the snapshot (served through a `StatusCache`); `serving()` says
    whether the daemon is ready (503 on /healthz otherwise); `history(job_id)` is a job's epoch records
    (`/v1/jobs/{job_id}/history`: the curves the dashboard charts)."""
    app = FastAPI(title="graphtier daemon", docs_url=None, redoc_url=None)
    cache = StatusCache(status)

    @app.get("/healthz", response_model=Health)
    def healthz() -> JSONResponse:
        ok = serving()
        body = Health(status="serving" if ok else "not_serving", pid=pid)
        return JSONResponse(body.model_dump(), status_code=200 if ok else 503)

    @app.get("/v1/status", response_model=DaemonStatus)
    async def v1_status() -> Response:  # on the event loop: the cached bytes need no worker thread
        return Response(cache.json(), media_type="application/json")

    @app.get("/v1/jobs/{job_id}/history")
    def job_history(job_id: str) -> JSONResponse:
        try:
            records = history(job_id) if history is not None else []
        except UnknownJobError as exc:
            return JSONResponse({"detail": str(exc)}, status_code=404)
        return JSONResponse({"job_id": job_id, "epochs": [_finite(record.to_json()) for record in records]})

    @app.get("/metrics")
    def prometheus_metrics() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/", response_class=HTMLResponse)
    def dashboard() -> str:
        return DASHBOARD_HTML

    return app
