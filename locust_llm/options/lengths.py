"""The output cap of a request: the one parser of ``--llm-max-tokens`` and a user class's
``max_tokens`` (pure).

A cap is a number or a distribution string (``256``, ``uniform:128,512``); "" means not given,
which falls back to :data:`DEFAULT_MAX_TOKENS` where no data set hint applies. Parsed
distributions are cached: the option check, the stage plan and every request read the same one.
"""

from __future__ import annotations

from functools import lru_cache

from locust_llm.workloads.distributions import Distribution, parse_distribution

#: The output cap when neither the options nor the data set give one.
DEFAULT_MAX_TOKENS = 256


@lru_cache(maxsize=64)
def max_tokens(spec: str, what: str = "--llm-max-tokens") -> Distribution:
    """The distribution of output caps ``spec`` asks for ("" = the default cap); an
    InputError naming ``what`` when it does not parse."""
    return parse_distribution(spec or str(DEFAULT_MAX_TOKENS), what=what)
