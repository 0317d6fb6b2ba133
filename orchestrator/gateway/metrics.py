"""The gateway's Prometheus metrics (prometheus_client, a registry of its own): requests, tokens,
decode speed, time to first token, queue wait, drafted and accepted tokens, per model and served
setting; the resident servers and the memory they hold. Labels carry model and setting names,
never a key, a prompt or a header."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specctl.orchestrator.runtime.routed import ACCEPTED, DRAFTED

SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
SPEEDS = (1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 250, 500, 1000)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r, ms = self.registry, ("model", "setting")
        self.requests = Counter("specctl_gateway_requests", "Requests answered, by HTTP status",
                                [*ms, "status"], registry=r)
        self.tokens = Counter("specctl_gateway_generated_tokens", "Tokens generated", ms,
                              registry=r)
        self.decode = Histogram("specctl_gateway_decode_tokens_per_second", "Decode speed of "
                                "a request (the engine's own timing where it reports one)", ms,
                                buckets=SPEEDS, registry=r)
        self.ttft = Histogram("specctl_gateway_time_to_first_token_seconds", "From the request's "
                              "arrival to its first token (queue wait and start included)", ms,
                              buckets=SECONDS, registry=r)
        self.queue = Histogram("specctl_gateway_queue_wait_seconds", "From the request's "
                               "arrival until it is sent to a ready server", ["model"],
                               buckets=SECONDS, registry=r)
        self.drafted = Counter(DRAFTED, "Draft tokens proposed", ms, registry=r)
        self.accepted = Counter(ACCEPTED, "Draft tokens accepted", ms, registry=r)
        self.starts = Counter("specctl_gateway_engine_starts", "Servers started", ms,
                              registry=r)
        self.stops = Counter("specctl_gateway_engine_stops", "Servers stopped, and why "
                             "(keep-alive, memory, swap, died, hung, failed, shutdown)",
                             [*ms, "reason"], registry=r)
        self.swaps = Counter("specctl_gateway_swaps", "Newly tuned settings swapped in",
                             ["model"], registry=r)
        self.resident = Gauge("specctl_gateway_engines", "Servers up (1) per model and setting",
                              ms, registry=r)
        self.inflight = Gauge("specctl_gateway_inflight_requests", "Requests in flight", ["model"],
                              registry=r)
        self.queued = Gauge("specctl_gateway_queued_requests", "Requests waiting in line for a "
                            "server's slot", ["model"], registry=r)
        self.memory = Gauge("specctl_gateway_resident_bytes", "Memory the resident servers hold "
                            "(planned)", registry=r)
        self.budget = Gauge("specctl_gateway_budget_bytes", "Memory budget of the resident "
                            "servers", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
