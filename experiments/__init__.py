"""Orchestration of whole experiments in one process: the paper's ablation in miniature (ablation.py)."""
