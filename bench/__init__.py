"""The experiments outside the package: benchmarks, studies and the paper's reproduction, each run as `python -m bench.<script>`."""
