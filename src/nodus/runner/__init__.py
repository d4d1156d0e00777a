"""Supervision, capture and recovery of runs."""
