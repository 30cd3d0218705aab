"""Read/write policies: the interface, the built-ins, and the entry-point registry.

Select one everywhere with a spec string, `load_policy("wait-k:k=3")`; `simulmt policies`
lists every registered policy with its arguments.
"""

from simulmt.policies.base import (
    DEFAULT_AGREEMENT,
    Action,
    AgreementPolicy,
    ChunkedPolicy,
    CommitMode,
    ModelSignals,
    Observation,
    Policy,
    PolicyError,
    SchedulePolicy,
    Signal,
    SpecPolicy,
    lag_bounds,
)
from simulmt.policies.registry import available, describe, load_policy
from simulmt.policies.schedules import FixedSchedule
from simulmt.policies.spec import BasePolicy

__all__ = [
    "DEFAULT_AGREEMENT",
    "Action",
    "AgreementPolicy",
    "BasePolicy",
    "ChunkedPolicy",
    "CommitMode",
    "FixedSchedule",
    "ModelSignals",
    "Observation",
    "Policy",
    "PolicyError",
    "SchedulePolicy",
    "Signal",
    "SpecPolicy",
    "available",
    "describe",
    "lag_bounds",
    "load_policy",
]
