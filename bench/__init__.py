"""errands benchmarks (issue 7): ``python -m bench [B1 B2 …]``; see docs/benchmarks.md."""
