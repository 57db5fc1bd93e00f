"""Readers, validation, rejects and splits for gold pairs."""

from augsbert_ray.data.gold import GoldData, load_gold
from augsbert_ray.data.paths import DataNotFoundError, resolve_data_dir
from augsbert_ray.data.readers import ReadResult, read_pairs
from augsbert_ray.data.sentences import read_sentences
from augsbert_ray.data.rejects import Reject, TooManyRejectsError, check_reject_fraction, write_rejects
from augsbert_ray.data.usable import check_gold_usable, check_reject_fractions

__all__ = [
    "DataNotFoundError",
    "GoldData",
    "ReadResult",
    "Reject",
    "TooManyRejectsError",
    "check_gold_usable",
    "check_reject_fraction",
    "check_reject_fractions",
    "load_gold",
    "read_pairs",
    "read_sentences",
    "resolve_data_dir",
    "write_rejects",
]
