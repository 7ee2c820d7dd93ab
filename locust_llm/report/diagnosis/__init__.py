"""The diagnosis: which resource limits each stage, and what to do about it.

``causes`` (the vocabulary: every verdict kind and cause, declared once), ``verdict`` (the
ordered rules: stage row -> Verdict), ``actions`` (actions per cause), ``rules_doc`` (generates
docs/rules.md from the rules), ``thresholds`` (the one table of thresholds), ``knee`` (best
concurrency and the recommended cap) and ``alerts`` (threshold checks).
"""
