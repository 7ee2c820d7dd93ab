"""locust-llm's own event hooks, declared the way ``locust.event.Events`` declares Locust's.

Listen in a locustfile::

    from locust_llm import llm_events

    @llm_events.request_done.add_listener
    def on_done(record, **kw): ...

Listeners take ``**kw`` so that arguments added later do not break them (Locust's advice).
"""

from __future__ import annotations

from locust.event import EventHook


class LLMEvents:
    """The hooks; one instance per process, :data:`llm_events` (as ``locust.events``)."""

    first_token: EventHook
    """Fired when a request's first token (content or reasoning) arrives.

    :param record: the request's ``RequestRecord`` (timings not summarised yet)
    :param ttft_s: seconds from sending the request to this token
    """

    request_done: EventHook
    """Fired once per request sent, after its record is complete (success or failure).

    :param record: the finished ``RequestRecord``
    """

    worker_lost: EventHook
    """Fired on the master once per worker given up for lost (its permits already reclaimed).

    :param environment: the master's Locust environment
    :param worker: the lost worker's id
    :param runtime: the master's locust-llm runtime (its recorder has every record received)
    """

    def __init__(self) -> None:
        for name in type(self).__annotations__:
            setattr(self, name, EventHook())


llm_events = LLMEvents()
