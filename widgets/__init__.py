"""Textual widgets: they only render Snapshots and Verdicts."""
