"""The simulated OpenAI-compatible LLM server: a physically grounded twin of a serving engine.

``engine`` (continuous batching, paged KV, roofline step times; pure), ``scheduler`` (real-time
steps on absolute deadlines), ``http`` + ``server`` (the OpenAI front), ``openai_format``,
``faults``, ``trace``, ``metrics`` + ``gpu`` (``/metrics``), ``textgen``, ``config``, ``cli``
(``locust-llm sim``) and ``testing`` (``running_sim`` for tests). Importing this package
imports none of them.
"""
