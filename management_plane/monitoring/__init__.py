"""Monitoring: the statsd -> Graphite pipeline, alert rules and their evaluation."""
