"""API adapters: what differs between OpenAI-style endpoints, one file per API.

An adapter builds the request body, classifies each streamed ``data:`` payload (text, usage,
error, the end of the stream), and parses a non-streamed body; the user class picks one by name
(``LLMUser.api = "chat"``). :func:`locust_llm.client.apis.base.get_api` finds a registered
adapter, importing ``locust_llm.client.apis.<name>`` on first use, so adding an API (say
``/v1/embeddings``) is one new file here that defines and registers its adapter.
"""
