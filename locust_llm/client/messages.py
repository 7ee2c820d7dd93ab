"""The messages locust-llm's master and workers exchange over Locust's runner (pure).

Each payload is a dataclass with ``to_dict`` (what goes on the wire: Locust serialises plain
data with msgpack) and ``from_dict`` (which checks and converts what came back). The names are
the message types registered with ``runner.register_message``.

    master -> worker   llm_stage         StageMessage   a stage starts (quota, rate, start)
    worker -> master   llm_permit_ask    PermitAsk      permits wanted for a stage
    master -> worker   llm_permit_grant  PermitGrant    permits granted (0: none left)
    worker -> master   llm_records       RecordBatch    records + sent/recorded counters
    master -> worker   llm_stop          (no payload)   stop users, flush, confirm
    worker -> master   llm_drained       worker id      the last records are sent
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

MSG_STAGE = "llm_stage"
MSG_PERMIT_ASK = "llm_permit_ask"
MSG_PERMIT_GRANT = "llm_permit_grant"
MSG_RECORDS = "llm_records"
MSG_STOP = "llm_stop"
MSG_DRAINED = "llm_drained"
#: master -> worker: a second stop signal; cancel the requests in flight now (recorded)
MSG_CANCEL = "llm_cancel"


@dataclass(frozen=True, slots=True)
class StageMessage:
    """A stage starts: ``quota`` permits to start with (None: no limit; 0: ask the master),
    the run-wide ``rate`` (req/s) that ``workers`` share, its wall-clock ``start``."""

    stage: int
    quota: int | None = None
    rate: float = 0.0
    workers: int = 1
    start: float = 0.0
    open_loop: bool = False

    @property
    def rate_share(self) -> float:
        """This worker's part of the rate."""
        return self.rate / max(self.workers, 1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StageMessage:
        quota = data.get("quota")
        return cls(
            stage=int(data.get("stage", -1)),
            quota=None if quota is None else int(quota),
            rate=float(data.get("rate") or 0.0),
            workers=max(int(data.get("workers") or 1), 1),
            start=float(data.get("start") or 0.0),
            open_loop=bool(data.get("open_loop")),
        )


@dataclass(frozen=True, slots=True)
class PermitAsk:
    """A worker wants ``n`` permits of ``stage``."""

    worker: str
    stage: int
    n: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PermitAsk:
        return cls(worker=str(data["worker"]), stage=int(data["stage"]), n=int(data["n"]))


@dataclass(frozen=True, slots=True)
class PermitGrant:
    """The master grants ``n`` permits of ``stage`` (0: the stage has none left)."""

    stage: int
    n: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PermitGrant:
        return cls(stage=int(data["stage"]), n=int(data["n"]))


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """Records (rows in ``RECORD_FIELDS`` order) and the worker's counters so far."""

    worker: str
    records: list[tuple[Any, ...]] = field(default_factory=list)
    sent: int = 0  # requests the worker has started
    recorded: int = 0  # records it has produced
    reconnects: int = 0  # requests it resent on a fresh connection
    backoffs: int = 0  # waits its users made after connection errors
    backing_off: int = 0  # its users in a back-off wait when the batch was taken
    #: open loop, per stage so far: [stage, drawn, pool_ran_dry, stage_ended, run_stopped]
    arrivals: list[list[int]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "records": self.records,
            "sent": self.sent,
            "recorded": self.recorded,
            "reconnects": self.reconnects,
            "backoffs": self.backoffs,
            "backing_off": self.backing_off,
            "arrivals": self.arrivals,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecordBatch:
        return cls(
            worker=str(data["worker"]),
            records=[tuple(r) for r in data.get("records") or []],
            sent=int(data["sent"]),
            recorded=int(data["recorded"]),
            reconnects=int(data.get("reconnects") or 0),
            backoffs=int(data.get("backoffs") or 0),
            backing_off=int(data.get("backing_off") or 0),
            arrivals=[[int(v) for v in row] for row in data.get("arrivals") or []],
        )
