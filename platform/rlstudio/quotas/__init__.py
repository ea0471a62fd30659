"""Quotas: how many GPUs, GPU-hours and concurrent runs each user may hold."""
