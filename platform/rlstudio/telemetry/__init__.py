"""Telemetry: what runs report (events, metrics, samples, memory) and its live push to browsers."""
