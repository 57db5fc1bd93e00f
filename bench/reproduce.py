"""The paper's experiments over seeds: the same as `augsbert reproduce` (augsbert_ray/reproduce.py).

    .venv/bin/python bench/reproduce.py --quick
    .venv/bin/python bench/reproduce.py --collect --runs bench/results/reproduce_runs
"""

import sys

from augsbert_ray.cli import main

if __name__ == "__main__":
    sys.exit(main(["reproduce", *sys.argv[1:]]))
