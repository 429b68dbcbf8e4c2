# Benchmarks are run by hand (python tests/benchmarks/bench_node.py), never collected by pytest.
collect_ignore_glob = ["bench_*.py"]
