"""Evaluation: reports over per-episode results (report.py) and plots of run metrics (plots.py)."""
