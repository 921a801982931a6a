"""Attacks: each crafts the Byzantine rows of a round. One file per attack.

``names()`` lists built-ins and installed plugins; ``create(name, **params)`` builds one.
"""

from __future__ import annotations

from ..registry import Registry

_BUILTINS = {
    "none": "robustfl.attacks.none:NoAttack",
    "sign_flip": "robustfl.attacks.sign_flip:SignFlip",
    "scaling": "robustfl.attacks.scaling:Scaling",
    "orthogonal": "robustfl.attacks.orthogonal:Orthogonal",
    "sybil": "robustfl.attacks.sybil:Sybil",
    "similarity_poisoning": "robustfl.attacks.similarity_poisoning:SimilarityPoisoning",
    "alie": "robustfl.attacks.alie:ALIE",
    "ipm": "robustfl.attacks.ipm:IPM",
    "min_max": "robustfl.attacks.min_max:MinMax",
    "min_sum": "robustfl.attacks.min_sum:MinSum",
    "fang_trim": "robustfl.attacks.fang_trim:FangTrim",
    "fang_krum": "robustfl.attacks.fang_krum:FangKrum",
    "fltrust_adaptive": "robustfl.attacks.fltrust_adaptive:FLTrustAdaptive",
    "optimal": "robustfl.attacks.optimal:Optimal",
    "gaussian": "robustfl.attacks.gaussian:Gaussian",
    "label_flip": "robustfl.attacks.label_flip:LabelFlip",
    "backdoor": "robustfl.attacks.backdoor:Backdoor",
    "mimic": "robustfl.attacks.mimic:Mimic",
    "drift": "robustfl.attacks.drift:Drift",
    "worst_case": "robustfl.attacks.worst_case:WorstCase",
    "mpaf": "robustfl.attacks.mpaf:MPAF",
    "rop": "robustfl.attacks.rop:ROP",
}

registry = Registry("attack", "robustfl.attacks", _BUILTINS)


# the module-level API: robustfl.<kind>.names(), create(name, **params), get, origin, register
names = registry.names
create = registry.create
get = registry.get
origin = registry.origin
register = registry.register
