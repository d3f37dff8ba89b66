"""Spark job entry points: `kaas analytics JOB ...` or `spark-submit analytics/jobs/JOB.py ...`."""
