"""Workloads real traffic has: multi-turn sessions, shared-prefix prompts, trace replay.

Pure modules (no locust, no gevent), lowest first: :mod:`.prompt` (``Prompt``, what a request
sends), :mod:`.tokenizer` (a local Hugging Face tokenizer), :mod:`.distributions` (the
token-length grammar), :mod:`.texts` (the common words, deterministic prompt text of a given
token length), :mod:`.shared_prefix` (K groups x P tokens + unique suffix), :mod:`.datasets`
(``--llm-dataset``'s prompt sources), :mod:`.sessions` (conversations: sources, think time,
carried history), :mod:`.traces` (Mooncake / JSONL / CSV traces, the prefix-cache hit rate their
hash ids imply). Locust-facing: :mod:`.partition` (which share of sessions or trace lines this
worker takes), :mod:`.users` (``SessionUser``, ``TraceReplayUser``). See docs/workloads.md.
"""
