"""Federation axes: algorithms (fedavg, fedprox, feddyn) and sharing schemes (full, psfed).

``algorithm_registry`` and ``sharing_registry`` are :class:`~robustfl.registry.Registry` objects like
``robustfl.attacks.registry``: built-ins plus plugins from the entry-point groups
``robustfl.algorithms`` and ``robustfl.sharing`` (or a ``--plugin`` file's ``ALGORITHMS`` /
``SHARING`` tables). A plugin derives from :class:`Algorithm` or :class:`Sharing`.
"""

from ..registry import Registry
from .base import Algorithm, Sharing, create_algorithm, create_sharing, resolve_params

algorithm_registry = Registry(
    "algorithm",
    "robustfl.algorithms",
    {
        "fedavg": "robustfl.federation.base:Algorithm",
        "fedprox": "robustfl.federation.fedprox:FedProx",
        "feddyn": "robustfl.federation.feddyn:FedDyn",
    },
)
sharing_registry = Registry(
    "sharing scheme",
    "robustfl.sharing",
    {"full": "robustfl.federation.base:Sharing", "psfed": "robustfl.federation.psfed:PSFed"},
)

__all__ = [
    "Algorithm",
    "Sharing",
    "algorithm_registry",
    "create_algorithm",
    "create_sharing",
    "resolve_params",
    "sharing_registry",
]
