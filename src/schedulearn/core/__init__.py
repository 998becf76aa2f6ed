"""The scheduling core: pure logic, standard library only, no I/O, no clock.

Everything that decides where jobs run lives here and is shared by the
simulator (`schedulearn.sim`) and the live scheduler
(`schedulearn.server`). See DESIGN.md section 2.
"""

from schedulearn.core.decisions import Decision, Preempt, Resize, Start
from schedulearn.core.ledger import GpuLedger, InvalidDecision
from schedulearn.core.placement import FreePool
from schedulearn.core.policy import Policy, QueueOrder, queue_order
from schedulearn.core.registry import UnknownPolicyError, available, create, register
from schedulearn.core.views import ClusterView, GpuView, JobView, NodeView, Placement

__all__ = [
    "ClusterView",
    "Decision",
    "FreePool",
    "GpuLedger",
    "GpuView",
    "InvalidDecision",
    "JobView",
    "NodeView",
    "Placement",
    "Policy",
    "Preempt",
    "QueueOrder",
    "Resize",
    "Start",
    "UnknownPolicyError",
    "available",
    "create",
    "queue_order",
    "register",
]
