"""Every ``--llm-*`` option, declared once, and what is derived from the declaration.

``spec`` (:class:`~locust_llm.options.spec.Option`: name, kind, default, help, env var, config
key, reader, check, ``ClientOptions`` field, secret, the ``run`` flag standing for it),
``table`` (``OPTIONS``, the declaration itself, and the Locust flags it adds), ``readers`` (a
raw value -> its typed field), ``validate`` (one check per value), ``config`` (the typed,
frozen ``ClientOptions``), ``settings`` (a user class's attributes resolved against it),
``lengths`` (the one output-cap parser). ``locust-llm options`` prints them and writes
docs/options.md (:mod:`locust_llm.launch.options_cli`). Pure: neither Locust nor gevent.

``from locust_llm.options import X`` for a name of ``table`` still works (deprecated).
"""

from typing import Any


def __getattr__(name: str) -> Any:
    from locust_llm._compat import forward

    return forward(__name__, name)
