"""Hand-run benchmarks (bench_*.py); see README.md. Not collected by pytest."""
