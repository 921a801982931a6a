"""Defenses (aggregation rules); pre-aggregators live in ``defenses/pre``. One file per rule.

``names()`` lists built-ins and installed plugins; ``create(name, **params)`` builds one.
"""

from __future__ import annotations

from ..registry import Registry

_BUILTINS = {
    "fedavg": "robustfl.defenses.fedavg:FedAvg",
    "fltrust": "robustfl.defenses.fltrust:FLTrust",
    "fedsim": "robustfl.defenses.fedsim:FedSim",
    "krum": "robustfl.defenses.krum:Krum",
    "multi_krum": "robustfl.defenses.multi_krum:MultiKrum",
    "median": "robustfl.defenses.median:Median",
    "trimmed_mean": "robustfl.defenses.trimmed_mean:TrimmedMean",
    "bulyan": "robustfl.defenses.bulyan:Bulyan",
    "geometric_median": "robustfl.defenses.geometric_median:GeometricMedian",
    "centered_clipping": "robustfl.defenses.centered_clipping:CenteredClipping",
    "foolsgold": "robustfl.defenses.foolsgold:FoolsGold",
    "flame": "robustfl.defenses.flame:Flame",
    "dnc": "robustfl.defenses.dnc:DnC",
    # -- issue 16, set A (signguard, meamed, mda, caf) --
    "meamed": "robustfl.defenses.meamed:MeaMed",
    "mda": "robustfl.defenses.mda:MDA",
    "signguard": "robustfl.defenses.signguard:SignGuard",
    "caf": "robustfl.defenses.caf:CAF",
    # -- issue 16, set B (smea, monna, foundationfl, fldetector) --
    "smea": "robustfl.defenses.smea:SMEA",
    "monna": "robustfl.defenses.monna:MoNNA",
    "foundationfl": "robustfl.defenses.foundationfl:FoundationFL",
    "fldetector": "robustfl.defenses.fldetector:FLDetector",
    # -- issue 16, item 1 (lasa) --
    "lasa": "robustfl.defenses.lasa:LASA",
}

PRE_BUILTINS = {
    "clipping": "robustfl.defenses.pre.clipping:Clipping",
    "arc": "robustfl.defenses.pre.arc:ARC",
    "bucketing": "robustfl.defenses.pre.bucketing:Bucketing",
    "nnm": "robustfl.defenses.pre.nnm:NNM",
}

registry = Registry("defense", "robustfl.defenses", _BUILTINS)
pre_registry = Registry("pre-aggregator", "robustfl.pre_aggregators", PRE_BUILTINS)


# the module-level API: robustfl.<kind>.names(), create(name, **params), get, origin, register
names = registry.names
create = registry.create
get = registry.get
origin = registry.origin
register = registry.register
