"""Runs: saved configs, runs and the run state machine."""
