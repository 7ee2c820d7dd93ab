"""Launching a load test: ``locust-llm run`` and ``demo`` start Locust's master and workers.

``sweep`` builds the Locust command line from the options, starts the built-in simulator for
``demo``, one worker per usable core, follows the master's live statistics on the console and
writes the report when the sweep ends.
"""
