"""Plans kept on disk (remat/planner/plan_cache.py): a second process reads the plan the first
one made, the same plan; an entry that cannot be read is planned and written again; the cache
can be turned off; processes planning at once leave one whole entry."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import pytest

import remat as rm
from remat.planner import plan_cache, solve
from remat.planner.plan import Block, Plan

# A step to plan, in a process of its own: prints its plan and the solver's status.
SCRIPT = textwrap.dedent("""
    import remat as rm
    layer = lambda h: h + rm.tanh(h)
    def loss(x):
        for _ in range(8):
            x = layer(x)
        return rm.sum(x)
    report = rm.memory.plan_report(loss, rm.ones((4096,)), memory_budget=0.6, strategy="chain")
    print(report.plan)
    print(report.solver_status)
""")


def _plan_in_a_process(folder) -> tuple[str, str]:
    env = {"REMAT_PLAN_CACHE": str(folder), "PATH": "", "HOME": str(folder)}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    plan, status = out.stdout.strip().splitlines()
    return plan, status


def test_a_second_process_reads_the_plan_the_first_made(tmp_path):
    plan, status = _plan_in_a_process(tmp_path)
    assert "read from the plan cache" not in status and "Block(" in plan
    entries = list(tmp_path.glob("*.plan"))
    assert len(entries) == 1 and not list(tmp_path.glob(".writing-*"))
    again, status = _plan_in_a_process(tmp_path)
    assert again == plan and status.endswith("; read from the plan cache")


def _report(folder, monkeypatch, budget=0.6):
    monkeypatch.setenv("REMAT_PLAN_CACHE", str(folder))
    monkeypatch.setattr(solve, "_CACHE", {})
    layer = lambda h: h + rm.tanh(h)  # noqa: E731
    loss = lambda x: rm.sum(layer(layer(layer(layer(layer(layer(x)))))))  # noqa: E731
    return rm.memory.plan_report(loss, rm.ones((2048,)), memory_budget=budget, strategy="chain")


def test_an_entry_that_cannot_be_read_is_planned_and_written_again(tmp_path, monkeypatch):
    first = _report(tmp_path, monkeypatch)
    (entry,) = tmp_path.glob("*.plan")
    entry.write_bytes(b"not a plan")  # cut short, or written by something else
    second = _report(tmp_path, monkeypatch)
    assert second.plan == first.plan and "plan cache" not in second.solver_status
    assert plan_cache.load(entry.name).plan == first.plan  # written again, whole
    third = _report(tmp_path, monkeypatch)
    assert third.plan == first.plan and third.solver_status.endswith("read from the plan cache")


def test_each_budget_has_its_own_entry_and_the_cache_can_be_off(tmp_path, monkeypatch):
    a, b = _report(tmp_path, monkeypatch, 0.6), _report(tmp_path, monkeypatch, 0.7)
    assert len(list(tmp_path.glob("*.plan"))) == 2 and a.budget_bytes < b.budget_bytes
    monkeypatch.setenv("REMAT_PLAN_CACHE", "off")
    assert plan_cache.directory() is None
    monkeypatch.setattr(solve, "_CACHE", {})
    layer = lambda h: h + rm.tanh(h)  # noqa: E731
    report = rm.memory.plan_report(lambda x: rm.sum(layer(layer(layer(x)))), rm.ones((512,)), memory_budget=0.8)
    assert "plan cache" not in report.solver_status and len(list(tmp_path.glob("*.plan"))) == 2


def test_a_folder_that_cannot_be_written_plans_as_before(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the folder would be")
    report = _report(blocked / "plans", monkeypatch)
    assert report.plan.blocks and "plan cache" not in report.solver_status


@pytest.mark.claims
def test_processes_planning_at_once_leave_one_whole_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("REMAT_PLAN_CACHE", str(tmp_path))
    env = {"REMAT_PLAN_CACHE": str(tmp_path), "PATH": "", "HOME": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(4)]
    plans = {p.communicate(timeout=600)[0].splitlines()[0] for p in procs}
    assert len(plans) == 1 and all(p.returncode == 0 for p in procs)
    (entry,) = tmp_path.glob("*.plan")
    assert str(plan_cache.load(entry.name).plan) == plans.pop() and not list(tmp_path.glob(".writing-*"))
    assert len(list(tmp_path.iterdir())) == 1


def test_a_plan_read_back_prints_as_the_plan_made():
    # A set keeps the order its history gave it: built by discarding from a larger one, it
    # printed otherwise than its pickled copy, and the benchmark's plan fingerprints (a digest
    # of the print) named one plan two ways. A Block prints its saved nodes sorted.
    grown = set(range(1000))
    for i in range(1000):
        if i not in (212, 216, 220, 224, 228):
            grown.discard(i)
    made = Plan((Block(212, 232, save=frozenset(grown)),), "chain")
    read = pickle.loads(pickle.dumps(made))
    assert repr(made.blocks[0].save) != repr(read.blocks[0].save)  # the sets print otherwise ...
    assert repr(read) == repr(made) == ("Plan(blocks=(Block(start=212, stop=232, inner=(), "
                                        "save=frozenset({212, 216, 220, 224, 228})),), strategy='chain')")


def test_a_plan_is_keyed_by_the_jax_it_was_counted_with(monkeypatch):
    """XLA's buffer report, which XLA plans are counted by, changes with JAX: another version
    plans anew."""
    real = plan_cache.metadata.version
    plan_cache._code_digest.cache_clear()
    here = plan_cache.entry_name("step", 0.5, "xla")
    monkeypatch.setattr(plan_cache.metadata, "version",
                        lambda package: "0.0.1" if package == "jaxlib" else real(package))
    plan_cache._code_digest.cache_clear()
    try:
        assert plan_cache.entry_name("step", 0.5, "xla") != here
    finally:
        monkeypatch.undo()
        plan_cache._code_digest.cache_clear()
    assert plan_cache.entry_name("step", 0.5, "xla") == here
