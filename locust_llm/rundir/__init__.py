"""The run dir: the contract between the load test and the report.

``layout`` (file names, run.json's schema and readers), ``runinfo`` (naming, the command line
without secrets, run.json's first fill), ``journal`` (the fsync'd record journal) and
``recorder`` (records from every process -> the master -> the run dir).

``from locust_llm.rundir import X`` for a name of ``layout`` still works (deprecated).
"""

from typing import Any


def __getattr__(name: str) -> Any:
    from locust_llm._compat import forward

    return forward(__name__, name)
