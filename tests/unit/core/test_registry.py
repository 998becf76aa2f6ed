"""The policy registry: names, specs, options, descriptions, and third-party entry points."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from schedulearn.core import UnknownPolicyError, available, create, registry
from schedulearn.core.policies.fifo import Fifo
from schedulearn.core.policies.srtf import Srtf
from schedulearn.core.policy import Policy
from schedulearn.core.policy_options import guess

BUILT_IN = {
    "edf",
    "elastic-fifo",
    "fifo",
    "round-robin",
    "srtf",
    "tetris",
    "timeslice",
    "tiresias",
}


def test_every_built_in_policy_is_registered() -> None:
    assert set(available()) >= BUILT_IN


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_every_policy_meets_the_protocol_and_describes_its_rule_and_source(name: str) -> None:
    policy = create(name)
    assert isinstance(policy, Policy)
    assert policy.name == name
    assert policy.tick_seconds is None or policy.tick_seconds > 0
    summary = registry.describe(name)
    # One paragraph, shown to users: the rule and where it comes from.
    assert "\n" not in summary and len(summary) > 80
    assert "Source" in summary or "source" in summary


def test_an_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownPolicyError) as err:
        create("fifoo")
    message = str(err.value)
    assert "'fifoo'" in message
    for name in BUILT_IN:
        assert name in message


def test_an_unknown_option_lists_the_options() -> None:
    with pytest.raises(UnknownPolicyError, match=r"no option quantum.*backfill=False"):
        create("fifo:quantum=3")


def test_spec_values_are_typed_and_dashes_become_underscores() -> None:
    name, options = registry.parse_spec(" tiresias:queues=3:threshold=3600:starvation-factor=0 ")
    assert name == "tiresias"
    assert options == {"queues": 3, "threshold": 3600.0, "starvation_factor": 0.0}
    # An option a policy declares no type for is guessed, as before types were read.
    assert [guess(v) for v in ("1.5", "yes", "abc", "7")] == [1.5, True, "abc", 7]


def test_a_malformed_option_says_how_to_write_it() -> None:
    with pytest.raises(UnknownPolicyError, match="name:key=value"):
        create("fifo:backfill")


def test_options_reach_the_policy() -> None:
    policy = create("srtf:margin=0.5:min_gain=10:preempt=false")
    assert isinstance(policy, Srtf)
    assert (policy.margin, policy.min_gain, policy.preempt) == (0.5, 10.0, False)
    fifo = create("fifo", backfill=True)
    assert isinstance(fifo, Fifo) and fifo.backfill is True


def test_options_of_lists_defaults() -> None:
    assert registry.options_of("timeslice") == {"quantum": 600.0}
    assert registry.options_of("round-robin") == {}


THIRD_PARTY = '''
from schedulearn.core.decisions import Start
from schedulearn.core.placement import FreePool


class LastNodeFirst:
    """Last node first: start the oldest job on the last node that fits."""

    name = "{name}"
    tick_seconds = None

    def __init__(self, reverse: bool = True) -> None:
        self.reverse = reverse

    def decide(self, view):
        if not view.pending:
            return []
        job = view.pending[0]
        pool = FreePool(tuple(reversed(view.nodes)) if self.reverse else view.nodes)
        placement = pool.first_fit(job)
        return [] if placement is None else [Start(job.id, placement)]
'''


def _install(tmp_path: Path, module: str, ep_name: str, class_name: str) -> None:
    """A real (if tiny) installed distribution: a module and its dist-info."""
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(THIRD_PARTY.format(name=class_name)))
    info = tmp_path / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[schedulearn.policies]\n{ep_name} = {module}:LastNodeFirst\n"
    )


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the registry load entry points again, and forget what it loads here."""
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    monkeypatch.setattr(registry, "_loaded", False)


def test_a_third_party_policy_loads_through_the_entry_point_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_registry: None
) -> None:
    _install(tmp_path, "slearn_lastnode", "last-node-first", "last-node-first")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "last-node-first" in available()
    assert set(available()) >= BUILT_IN
    policy = create("last-node-first:reverse=true")
    assert registry.describe("last-node-first").startswith("Last node first")

    from core_scenario import Scenario, job, node, starts

    s = Scenario(node("a", 2), node("b", 2))
    assert starts(s.decide(policy, 0, [job(1)]))[1].nodes == ("b",)
    sys.modules.pop("slearn_lastnode", None)


def test_an_entry_point_whose_name_disagrees_with_the_class_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_registry: None
) -> None:
    _install(tmp_path, "slearn_misnamed", "misnamed", "something-else")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="make the two agree"):
        available()
    sys.modules.pop("slearn_misnamed", None)


def test_threads_looking_policies_up_at_once_all_see_every_policy() -> None:
    # The server's event loop and database thread both look policies up at start.
    import subprocess
    import sys

    code = (
        "import threading\n"
        "from schedulearn.core import registry\n"
        "seen = []\n"
        "go = threading.Barrier(8)\n"
        "def look():\n"
        "    go.wait(); seen.append(len(registry.available()))\n"
        "ts = [threading.Thread(target=look) for _ in range(8)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "print(min(seen), max(seen))\n"
    )
    for _ in range(5):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
        low, high = map(int, out.split())
        assert low == high > 5, out
