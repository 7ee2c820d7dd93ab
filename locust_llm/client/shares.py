"""Which share of a workload this process takes: worker ``index`` of ``count`` (the Locust side).

Sessions and trace lines are numbered; process ``index`` of ``count`` takes the numbers ``n``
with ``n % count == index``, so every one is run by exactly one worker. The master decides the
partition when the test starts (its connected workers, sorted by id) and sends each worker its
own before Locust's first spawn message; a trace replay sends it again with the schedule's
origin (the wall-clock instant of the trace's time 0). One process alone is ``0 of 1``.

Locust connects a worker before the worker's ``init`` registers message handlers, so a share
sent early could be lost: each worker also asks for its share at init, and its users wait until
they know it. A worker the partition counted gets its share again; a worker that connects while
a test runs gets an empty share (``count`` 0): it takes nothing, so the running workers' shares
stay exactly once.

A worker lost while a trace replays leaves its share to the others: the master hands the lines
of its share not yet due (``hand_over``) to the live workers, which add them to theirs
(``Partition.adopted``); the lost worker's lines that were due and never reported are recorded
by the master (see :mod:`locust_llm.client.workload_users`).

The share itself, :class:`~locust_llm.workloads.partition.Partition`, is pure (the unit tests
import it without Locust).
"""

from __future__ import annotations

import math
from typing import Any

from locust import events
from locust.runners import MasterRunner, WorkerRunner

from locust_llm.client.runtime import distributed_process
from locust_llm.workloads.partition import UNKNOWN, Partition

MSG_PARTITION = "llm_partition"
MSG_PARTITION_ASK = "llm_partition_ask"
MSG_ADOPT = "llm_partition_adopt"

_partitions: dict[int, Partition] = {}
_sent: dict[int, dict[str, dict[str, Any]]] = {}  # master: environment -> worker -> its share


def partition(environment: Any) -> Partition:
    """The partition of ``environment``'s process (``0 of 1`` until the master says otherwise)."""
    part = _partitions.get(id(environment))
    if part is None:
        part = _partitions[id(environment)] = Partition()
    return part


def send_partitions(environment: Any, origin_wall_s: float = math.nan) -> int:
    """Master (or a lone process): hand out the partition; returns the number of shares."""

    runner = environment.runner
    part = partition(environment)
    part.origin_wall_s = origin_wall_s
    if not isinstance(runner, MasterRunner):
        part.index, part.count = 0, 1
        return 1
    workers = sorted(c.id for c in runner.clients.all if c.state != "missing")
    sent = _sent.setdefault(id(environment), {})
    sent.clear()
    for index, worker in enumerate(workers):
        data = {"index": index, "count": len(workers), "origin_wall_s": origin_wall_s}
        sent[worker] = data
        runner.send_message(MSG_PARTITION, data, client_id=worker)
    return max(len(workers), 1)


def share_of(environment: Any, worker: str) -> tuple[Partition, list[str]] | None:
    """Master: ``worker``'s share as the master handed it out (adopted numbers included), and
    the other workers of the partition; None if the partition did not count it."""
    sent = _sent.get(id(environment), {})
    data = sent.get(worker)
    if data is None:
        return None
    share = Partition(int(data["index"]), int(data["count"]), float(data["origin_wall_s"]))
    share.adopted = list(data.get("adopted", ()))
    return share, [w for w in sent if w != worker]


def hand_over(environment: Any, numbers: list[int], workers: list[str]) -> dict[str, list[int]]:
    """Master: deal ``numbers`` (in the order given) round robin to ``workers``, each told with
    one message; returns what each got."""
    dealt: dict[str, list[int]] = {w: numbers[i :: len(workers)] for i, w in enumerate(workers)}
    sent = _sent.setdefault(id(environment), {})
    for worker, mine in dealt.items():
        if not mine:
            continue
        sent.setdefault(worker, {"index": -1, "count": 0, "origin_wall_s": math.nan})
        sent[worker]["adopted"] = [*sent[worker].get("adopted", ()), *mine]
        environment.runner.send_message(MSG_ADOPT, {"numbers": mine}, client_id=worker)
    return dealt


def _receive_adopted(environment: Any, msg: Any, **_kw: Any) -> None:
    partition(environment).adopted.extend(int(n) for n in msg.data["numbers"])


def _receive(environment: Any, msg: Any, **_kw: Any) -> None:
    part = partition(environment)
    part.index, part.count = int(msg.data["index"]), int(msg.data["count"])
    part.origin_wall_s = float(msg.data["origin_wall_s"])
    part.adopted = [int(n) for n in msg.data.get("adopted", ())]


def _on_init(environment: Any, **_kw: Any) -> None:

    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        # Locust connects a worker before its init: ask for the share now that the answer has
        # a handler, and let no user take a share until it is known
        partition(environment).count = UNKNOWN
        runner.register_message(MSG_PARTITION, _receive)
        runner.register_message(MSG_ADOPT, _receive_adopted)
        runner.send_message(MSG_PARTITION_ASK, None)
    elif isinstance(runner, MasterRunner):
        runner.register_message(
            MSG_PARTITION_ASK,
            lambda environment, msg, **_kw: _answer(environment, str(msg.node_id)),
        )


def _answer(environment: Any, client_id: str) -> None:
    """Master: a worker asks for its share (once, at its init). A worker the partition counted
    gets its share again (the first send may have come before it could read it); a newcomer to
    a running test gets an empty share, so the others' stay whole; before the test starts,
    test_start answers every worker."""
    runner = environment.runner
    data = _sent.get(id(environment), {}).get(client_id)
    if data is None and getattr(runner, "state", "") in ("spawning", "running"):
        data = {"index": -1, "count": 0, "origin_wall_s": math.nan}
    if data is not None:
        runner.send_message(MSG_PARTITION, data, client_id=client_id)


def _on_test_start(environment: Any, **_kw: Any) -> None:

    if environment.runner is None and distributed_process(environment):
        return  # a worker whose runner is still being built (never the master at test_start)
    # a shape's first tick may come before test_start and have set the origin already
    if not isinstance(environment.runner, WorkerRunner):
        send_partitions(environment, partition(environment).origin_wall_s)


_installed = False


def install() -> None:
    """Register the listeners on Locust's events (once; importing :mod:`.users` does it)."""
    global _installed
    if _installed:
        return
    _installed = True

    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
