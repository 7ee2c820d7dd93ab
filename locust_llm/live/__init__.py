"""Live statistics while a run goes on: histograms, per-stage tallies and the console's progress.

``histogram`` (the log-bucketed histogram), ``llmstats`` (worker -> master merge, llm_stats.csv),
``stage_tally`` (each stage's QPS, tokens/s and TTFT P50 from the records the master receives)
and ``progress`` (the console line that follows the master's /llm/stats). The web UI tab
(``locust_llm.webui``) reads them.
"""
