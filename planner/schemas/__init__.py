"""JSON schemas, shipped as package data."""
