"""Token-length distributions written as short strings (``256``, ``uniform:128,512`` ...).

Pure. :func:`parse_distribution` turns a flag value into a :class:`Distribution` whose
:meth:`~Distribution.sample` draws a whole number of tokens (>= 1) from a ``random.Random``. It is
the one grammar and sampler of token lengths: the client's ``--llm-input-len`` (the random
dataset) and ``--llm-max-tokens``, the session and shared-prefix lengths, virtual time's
``--input-len`` / ``--max-tokens`` and the simulator's ``--output-len``
(:class:`~locust_llm.workloads.textgen.OutputLengths`).

Forms (parameters separated by ``,`` or ``:``; every draw is rounded and clipped at >= 1):

=========================  ============================================================
``N`` or ``fixed:N``       always N (``const:N``, ``constant:N`` too)
``uniform:LO,HI``          a whole number from LO to HI, both included
``normal:MEAN,STDDEV``     normal
``lognormal:MEAN,SIGMA``   log-normal with mean MEAN; SIGMA is the stddev of the underlying
                           normal
``exp:MEAN``               exponential with mean MEAN (``exponential:MEAN`` too)
=========================  ============================================================
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from locust_llm.errors import InputError

_EXPECTED = "N, uniform:LO,HI, normal:MEAN,STDDEV, lognormal:MEAN,SIGMA or exp:MEAN"
_ARITY = {"fixed": 1, "uniform": 2, "normal": 2, "lognormal": 2, "exp": 1}
_ALIASES = {"exponential": "exp", "const": "fixed", "constant": "fixed"}


@dataclass(frozen=True, slots=True)
class Distribution:
    """A distribution of token counts; ``kind`` is one of fixed/uniform/normal/lognormal/exp."""

    kind: str
    params: tuple[float, ...]

    def sample(self, rng: random.Random) -> int:
        """One draw: a whole number of tokens, at least 1."""
        kind, p = self.kind, self.params
        if kind == "fixed":
            return int(p[0])
        if kind == "uniform":
            return rng.randint(int(p[0]), int(p[1]))
        if kind == "normal":
            value = rng.gauss(p[0], p[1])
        elif kind == "lognormal":
            sigma = p[1]
            value = rng.lognormvariate(math.log(p[0]) - sigma * sigma / 2, sigma)
        else:  # exp
            value = rng.expovariate(1.0 / p[0])
        return max(1, round(value))

    @property
    def mean(self) -> float:
        """The mean before rounding and clipping (what the spec asks for)."""
        if self.kind == "uniform":
            return (self.params[0] + self.params[1]) / 2
        return self.params[0]

    def __str__(self) -> str:
        if self.kind == "fixed":
            return str(int(self.params[0]))
        return f"{self.kind}:" + ",".join(f"{p:g}" for p in self.params)


def parse_distribution(text: str | int, *, what: str = "distribution") -> Distribution:
    """Read ``text`` (see the module docstring); ``what`` names the input in errors."""
    raw = str(text).strip()
    kind, sep, rest = raw.partition(":")
    kind = kind.strip().lower()
    if not sep:
        kind, rest = "fixed", raw
    kind = _ALIASES.get(kind, kind)
    arity = _ARITY.get(kind)
    if arity is None:
        raise InputError(f"{what}: cannot read {raw!r}; expected {_EXPECTED}")
    parts = [p.strip() for p in rest.replace(":", ",").split(",")] if rest.strip() else []
    if len(parts) != arity:
        raise InputError(
            f"{what}: {raw!r} needs {arity} parameter{'s' if arity > 1 else ''}; "
            f"expected {_EXPECTED}"
        )
    try:
        params = tuple(float(p) for p in parts)
    except ValueError:
        raise InputError(
            f"{what}: {raw!r} has a non-numeric parameter; expected {_EXPECTED}"
        ) from None
    if not all(math.isfinite(p) for p in params):
        raise InputError(f"{what}: {raw!r} has a non-finite parameter")
    _check(kind, params, raw, what)
    return Distribution(kind, params)


def _check(kind: str, p: tuple[float, ...], raw: str, what: str) -> None:
    if kind in ("fixed", "uniform"):
        if any(x != int(x) or x < 1 for x in p):
            raise InputError(f"{what}: {raw!r} needs whole numbers >= 1")
        if kind == "uniform" and p[1] < p[0]:
            raise InputError(f"{what}: {raw!r} has HI < LO")
    elif p[0] <= 0:
        raise InputError(f"{what}: the mean of {raw!r} must be > 0")
    elif kind in ("normal", "lognormal") and p[1] < 0:
        raise InputError(f"{what}: the spread of {raw!r} must be >= 0")
