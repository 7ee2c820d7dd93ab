"""The diagnosis: which resource limits each stage, and what to do about it.

``verdict`` (the ordered rules: stage row -> Verdict), ``actions`` (actions per cause),
``thresholds`` (the one table of thresholds), ``knee`` (best concurrency and the recommended cap)
and ``alerts`` (threshold checks).
"""
