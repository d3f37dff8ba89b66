"""Checking that every port of a cluster requires TLS and authentication."""
