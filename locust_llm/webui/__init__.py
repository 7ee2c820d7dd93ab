"""The "LLM" tab in Locust's web UI: routes (:mod:`.routes`), the numbers they serve
(:mod:`.data`, pure) and the page's static HTML/CSS/JS (:mod:`.static`, package data).

Importing this package imports neither Flask nor Locust; :func:`routes.install` does, when the
Locust master (or single process) with a web UI calls it.
"""
