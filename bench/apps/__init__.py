"""Celery apps the benchmarks start as workers (not benchmarks themselves)."""
