"""Federation axes: algorithms (fedavg, fedprox, feddyn) and sharing (full, psfed)."""

from .base import Algorithm, Sharing, create_algorithm, create_sharing

__all__ = ["Algorithm", "Sharing", "create_algorithm", "create_sharing"]
