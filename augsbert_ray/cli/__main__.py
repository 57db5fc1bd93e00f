"""`python -m augsbert_ray.cli`: the `augsbert` command."""

import sys

from augsbert_ray.cli import main

sys.exit(main())
