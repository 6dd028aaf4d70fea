"""POSIX shared-memory segments: one owner creates and unlinks them, any process attaches.

`SegmentOwner` creates segments named after its pid and start time and unlinks them on
close, exit or SIGTERM/SIGINT; `reclaim_stale_segments` removes those of owners that died;
`SegmentRef` + `attach_tensor` let another process see a tensor without copying it.
"""

from graphtier.service.shm.reclaim import reclaim_stale_segments
from graphtier.service.shm.ref import SegmentRef, attach_tensor
from graphtier.service.shm.segment import SharedSegment
from graphtier.service.shm.segment_owner import SegmentOwner

__all__ = ["SegmentOwner", "SegmentRef", "SharedSegment", "attach_tensor", "reclaim_stale_segments"]
