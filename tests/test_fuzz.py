"""The differential fuzzer's CI profiles: 300 random programs (tests/fuzz_programs.py), the first 20
with every `make test` and the rest in the claims tier (`make check`), checked
against JAX in float64 — eagerly and under rm.jit on both backends, value, gradients and, for
some, second order — in chunks of seeds, so a failure names its seed and prints its program.
`make fuzz` runs the long campaign. And the fuzzer's own checks: it is reproducible, it covers
what it claims to, and it does catch a wrong gradient."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest

import fuzz_programs as fp
import remat as rm

#: The short profile runs with every `make test`; the long one in the claims tier (`make check`).
SHORT = range(0, 20)
LONG = range(20, 300)
PROFILE = range(SHORT.start, LONG.stop)
CHUNK = 25

#: Seeds whose programs expose a genuine remat bug, each with its minimal reproduction. They
#: stay out of the profile and are expected to fail (strictly: a fix turns them into errors
#: here, and then the seed goes back into the profile).
#: Seed 103 (XLA `take` on a constant block output) was fixed, and
#: tests/test_indexing.py::test_take_from_a_constant_a_checkpoint_returns_lowers_on_xla keeps it.
KNOWN: dict[int, str] = {}


def _assert_no_failures(failures: list[fp.Failure]) -> None:
    if failures:
        out = io.StringIO()
        fp._report(failures, out)
        pytest.fail(f"{len(failures)} failed checks\n{out.getvalue()}", pytrace=False)


def _chunks(profile: range, chunk: int, *marks):
    return [pytest.param([s for s in range(a, min(a + chunk, profile.stop)) if s not in KNOWN],
                         id=f"seeds{a}-{min(a + chunk, profile.stop) - 1}", marks=marks)
            for a in range(profile.start, profile.stop, chunk)]


#: Seeds outside the profiles whose programs found a bug since fixed: they run with `make test`.
#: 195 and 454: vmap of jacrev with respect to a shared input summed the entries' rows; 3167:
#: eager jacrev through a checkpoint in a fori_loop differed from the jitted one (a prune that
#: dropped a checkpoint's unread inputs, meant for linearize only); 1509: a vmapped cond's branch
#: NaN at untaken entries through a tensor it captured sent NaN gradients there; 1743: a policy
#: around a loop kept a sort's indices but not the values the loop's recomputation reads.
#: 2729: jacrev through a binomial scan inside a segments scan differentiated the segment's
#: backward block, which the binomial gradient in it refuses; 5115: linearize of a JVP block
#: whose policy reached into its loop (a step checkpointed as one block tied primal to tangent);
#: 6761: jvp through a checkpoint saving everything around a while_loop ran the loop's refused
#: gradient in the forward pass (it read only primal values, so the policy could save it);
#: 6976, 9044: eager jacrev emitted its backward under vmap, and a checkpoint bound eagerly wrote
#: into the program's input arrays (wrong values in every later mode).
FIXED = [195, 454, 1509, 1743, 2729, 3167, 5115, 6761, 6976, 9044]


def _profile():
    """Both profiles in chunks of seeds, the seeds of fixed bugs, then each known-bug seed alone,
    expected to fail."""
    known = [pytest.param([s], id=f"seed{s}", marks=pytest.mark.xfail(strict=True, reason=r)) for s, r in KNOWN.items()]
    fixed = [pytest.param(FIXED, id="fixed-bugs")]
    return _chunks(SHORT, 10) + _chunks(LONG, CHUNK, pytest.mark.claims) + fixed + known


@pytest.mark.parametrize("seeds", _profile())
def test_random_programs_agree_with_jax(seeds):
    programs, checks, failures = fp.run(seeds)
    assert programs == len(seeds)
    # value and one gradient at least, in every mode, per program; the eager forward too
    assert checks >= programs * (2 * len(fp.MODES) + 1)
    _assert_no_failures(failures)


def test_a_program_is_a_function_of_its_seed():
    a, b, c = fp.generate(7), fp.generate(7), fp.generate(8)
    assert a.script() == b.script() and a.source("jax") == b.source("jax")
    assert all(np.array_equal(x, y) for x, y in zip(a.inputs, b.inputs))
    assert a.script() != c.script()


REQUIRED = {
    "checkpoint call", "checkpoint noinput", "checkpoint tuple", "checkpoint partial", "remat call",
    "custom_vjp call", "jit call", "vmap", "vmap over the program", "second order", "dropout", "traced index",
    "created tensors",
    "stop_gradient", "capture in checkpoint", "capture in remat", "capture in vmap", "capture in jit",
    "capture of a capture",
    "checkpoint inside checkpoint", "checkpoint inside vmap", "vmap inside checkpoint",
    "checkpoint inside custom_vjp", "block returns an input or a capture",
    "policy none", "policy nothing", "policy everything", "policy dots", "policy only", "policy but",
    "xla branches", "xla inline",
    "scan", "scan step", "scan segments", "scan binomial", "scan reverse", "scan over a length", "fori_loop",
    "while_loop", "cond", "switch", "cond under vmap", "switch under vmap", "nan branch", "nan branch under vmap",
    "sort", "reduction", "jvp", "linearize", "jacrev", "forward over reverse", "forward only",
    "loop carries a tuple", "capture in scan", "capture in cond", "checkpoint inside scan", "scan inside checkpoint",
}


def test_the_profile_covers_every_kind_of_program():
    seen: dict[str, int] = {}
    for seed in PROFILE:
        for f in fp.generate(seed).features:
            seen[f] = seen.get(f, 0) + 1
    missing = REQUIRED - set(seen)
    assert not missing, f"no program of the CI profile has {sorted(missing)}"
    assert seen["second order"] >= 50 and seen["vmap over the program"] >= 30, seen


def _tanh_program() -> fp.Program:
    """loss(x0) = sum(tanh(x0) * w): a hand-made program, so the mutant below is sure to be hit."""
    body = fp.Body("loss", ["x0"], [fp.Stmt("v0", "rm.tanh(x0)", "jnp.tanh(x0)")], ["v0"])
    x = np.array([[0.25, -1.5, 0.75], [1.0, 0.5, -0.125]])
    w = np.array([[0.5, -1.0, 0.25], [0.75, -0.5, 1.0]])
    return fp.Program(-1, ["x0"], [x], body, [w], (0,), None, [np.ones_like(x)], True, frozenset())


def test_the_checker_passes_a_correct_program():
    checks, failures = fp.check(_tanh_program())
    assert failures == []
    assert checks == 3 * 3 + 1  # value, gradient, second order per mode; the eager forward


def test_the_checker_catches_a_wrong_gradient(monkeypatch):
    op = rm.ops.OPS["tanh"]
    monkeypatch.setattr(op, "vjp", lambda g, x, out: (g * (1.0 - out * out) * (1 + 1e-7),))
    checks, failures = fp.check(_tanh_program())
    wrong = sorted(f.check for f in failures)
    # the values stay right; every gradient is wrong by a relative 1e-7, far above RTOL
    assert wrong == sorted(f"{m} {k}" for m in fp.MODES for k in ("grad x0", "d2 x0")), wrong
    assert all("max |error|" in f.message and "remat" in f.message for f in failures)


def test_the_checker_reports_a_remat_error_as_a_failure(monkeypatch):
    def broken(g, x, out):
        raise RuntimeError("vjp rule exploded")

    monkeypatch.setattr(rm.ops.OPS["tanh"], "vjp", broken)
    _, failures = fp.check(dataclasses.replace(_tanh_program(), directions=None))
    assert [f.check for f in failures] == list(fp.MODES)
    assert all("RuntimeError: vjp rule exploded" in f.message for f in failures)


@pytest.mark.parametrize("seed", [3, 4, 7])  # vmapped as a whole, in forward mode through a scan; second order; plain
def test_the_printed_script_is_the_program_that_ran(seed):
    program = fp.generate(seed)
    printed: list = []
    exec(program.script(), {"print": printed.append})
    want = fp.remat_results(program, "numpy")
    assert len(printed) == 3  # eager, NumPy, XLA
    for out in printed:
        got = fp._flatten(out, program)
        assert got.keys() == want.keys()
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=fp.RTOL, atol=fp.ATOL, err_msg=k)


def test_the_command_line_prints_totals_and_each_failure(capsys, monkeypatch):
    assert fp.main(["--count", "2", "--start", "0", "--modes", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "2/2 programs" in out and "programs 2  checks" in out and "failures 0" in out
    monkeypatch.setattr(fp, "generate", lambda seed: dataclasses.replace(_tanh_program(), seed=seed))
    monkeypatch.setattr(rm.ops.OPS["tanh"], "vjp", lambda g, x, out: (g * 2.0,))
    assert fp.main(["--count", "1", "--start", "5", "--modes", "numpy"]) == 1
    out = capsys.readouterr().out
    assert "==== seed 5: 2 failed checks" in out and "numpy grad x0: max |error|" in out
    assert "def terms(x0):\n    v0 = rm.tanh(x0)" in out and "failing seeds: 5" in out
