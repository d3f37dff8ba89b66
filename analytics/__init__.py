"""analytics package."""
