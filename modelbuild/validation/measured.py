"""What the validate stage measured, as the reports and gates read it (no numpy: no-op builds read it too)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    """metrics.json as the validate stage wrote it: what running the library showed, or why it did not run.
    Strict: a key this class does not know fails loudly, so the writer and the readers cannot drift apart."""

    ran: bool
    reason: str | None = None  # why not run, where ran is false
    accuracy: dict[str, dict] | None = None  # per output in graph order: max_abs, max_rel, cosine, sqnr_db, top-k
    accuracy_vs_qdq: dict[str, dict] | None = None  # an int8 build against onnxruntime's own QDQ model
    latency_ms: dict | None = None  # timing_summary()
    baseline_latency_ms: dict | None = None  # the baseline's library, timed in turns with this one (paired)
    float_latency_ms: dict | None = None  # the float build's library, timed in turns with this one (beside_float)
    cold_ms: float | None = None  # load and first run
    scaling: dict | None = None  # scaling_summary(), where timing.scaling asked for it
    roofline: dict | None = None  # where timing.roofline asked for it
    artifact_bytes: int | None = None
    # the share of this machine's CPUs other processes used while the library was timed (metrics.others_share)
    others_cpu: float | None = None
    # the share of its CPUs' time a CPU quota withheld from its cgroup while it was timed (metrics.throttled_share)
    throttled: float | None = None
    peak_rss_bytes: int | None = None
    machine: dict | None = None
    threads: int | None = None
    samples: int | None = None  # golden samples compared

    @classmethod
    def from_json(cls, data: dict) -> Measured:
        return cls(**data)
