"""The client side of a load test: what runs inside Locust to send LLM requests and keep records.

Pure modules (import neither locust nor gevent; unit-tested in-process)::

    options     OPTIONS: every --llm-* option declared once (option_spec: what an entry is;
                readers / validate: an entry's reader and check; lengths: the output cap)
    config      ClientOptions: the --llm-* options as one frozen, typed object
    settings    UserSettings: a user class's attributes resolved against ClientOptions
    arrivals    open-loop arrival processes (Poisson, gamma, constant) as small strategies
    gate        StageGate: request permits per stage and open-loop send slots
    messages    typed payloads of the messages between master and workers
    stream      one response read into one record: the per-token loop (sse + metrics)
    runinfo     run-dir naming, the command line without secrets, run.json's first fill
    apis/       API adapters (chat, completions) and their registry

Locust-facing modules (import locust / gevent)::

    runtime     Runtime: one per Locust Environment (options, gate, recorder, live stats)
    transport   the HTTP connections a user keeps, one per server (geventhttpclient)
    discovery   the model a server serves (GET /v1/models), for classes that name none
    events      LLMEvents: the custom event hooks a locustfile can listen to
    lifecycle   the listeners on Locust's events: start, drain, flush, run-dir writing

``locust_llm.client.user`` holds the user classes locustfiles extend.
"""
