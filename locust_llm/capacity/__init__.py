"""Capacity under SLOs: percentile intervals from order statistics, the SLO grammar, when a
stage's figures are steady, and the search that asks "how much load meets every SLO?".

Pure (no locust, no gevent, no I/O): the simulator's virtual time (:mod:`locust_llm.sim`), the
Locust shape planned on the master (:mod:`locust_llm.client`) and the report all use these
modules; docs/capacity.md describes the method.
"""
