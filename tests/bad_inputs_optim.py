"""Bad arguments to rm.optim: hyperparameters out of range or of the wrong type (caught when the
optimizer is made), and trees that do not match the parameters (caught at init or update)."""

from __future__ import annotations

import remat as rm
from bad_inputs import Case

P = {"w": rm.ones((2,)), "b": rm.zeros(())}
T = rm.ArgumentTypeError
V = rm.ArgumentValueError
AT = r"\(at bad_inputs_optim\.py:\d+\)"  # the user's line: the case's lambda


def _update(opt, grads=P, state=None, params=P):
    return opt.update(grads, opt.init(params) if state is None else state, params)


CASES: list[Case] = [
    # Hyperparameters: checked when the optimizer is made, naming the optimizer, argument and value.
    Case("optim-sgd-negative-learning-rate", lambda: rm.optim.sgd(-0.1), V,
         (r"^sgd:", r"learning_rate", r"-0\.1", r">= 0", AT)),
    Case("optim-sgd-string-learning-rate", lambda: rm.optim.sgd("0.1"), T, (r"^sgd:", r"learning_rate", r"'0\.1'")),
    Case("optim-adam-nan-learning-rate", lambda: rm.optim.adam(float("nan")), V, (r"^adam:", r"learning_rate", r"nan")),
    Case("optim-adam-inf-learning-rate", lambda: rm.optim.adam(float("inf")), V,
         (r"^adam:", r"learning_rate", r"finite", r"inf")),
    Case("optim-adam-bool-learning-rate", lambda: rm.optim.adam(True), T, (r"^adam:", r"learning_rate", r"True")),
    Case("optim-adam-b1-one", lambda: rm.optim.adam(1e-3, b1=1.0), V, (r"^adam:", r"b1", r"\[0, 1\)", r"1\.0")),
    Case("optim-adam-b2-negative", lambda: rm.optim.adam(1e-3, b2=-0.1), V, (r"^adam:", r"b2", r"-0\.1")),
    Case("optim-adam-eps-negative", lambda: rm.optim.adam(1e-3, eps=-1e-8), V, (r"^adam:", r"eps", r"-1e-08")),
    Case("optim-adamw-weight-decay-negative", lambda: rm.optim.adamw(1e-3, weight_decay=-1), V,
         (r"^adamw:", r"weight_decay", r"-1\.0")),
    Case("optim-sgd-momentum-above-one", lambda: rm.optim.sgd(0.1, momentum=2.0), V,
         (r"^sgd:", r"momentum", r"\[0, 1\]", r"2\.0")),
    Case("optim-sgd-momentum-string", lambda: rm.optim.sgd(0.1, momentum="0.9"), T, (r"^sgd:", r"momentum", r"'0\.9'")),
    Case("optim-sgd-nesterov-without-momentum", lambda: rm.optim.sgd(0.1, nesterov=True), V,
         (r"^sgd:", r"nesterov=True", r"momentum=None", r"pass momentum=0\.9")),
    Case("optim-sgd-nesterov-not-bool", lambda: rm.optim.sgd(0.1, momentum=0.9, nesterov="yes"), T,
         (r"^sgd:", r"nesterov", r"'yes'")),
    Case("optim-adamw-mask-int-leaves", lambda: rm.optim.adamw(1e-3, mask={"w": 1, "b": 0}), T,
         (r"^adamw:", r"mask", r"True or False", r"got 0")),
    # Trees: the grads, the state and the mask must match the params.
    Case("optim-adamw-mask-other-structure", lambda: _update(rm.optim.adamw(1e-3, mask={"w": True})), V,
         (r"^adamw\.update:", r"mask", r"\{'w': \*\}", r"\{'b': \*, 'w': \*\}")),
    Case("optim-update-grads-missing-a-leaf", lambda: _update(rm.optim.adam(1e-3), grads={"w": rm.ones((2,))}), V,
         (r"^adam\.update:", r"grads has the structure \{'w': \*\}", r"params have \{'b': \*, 'w': \*\}", AT)),
    Case("optim-update-grads-wrong-shape", lambda: _update(rm.optim.adam(1e-3), grads={"w": rm.ones((3,)), "b": 0.0}),
         rm.ShapeError, (r"^adam\.update:", r"grads\['w'\] has shape \(3,\)", r"params\['w'\] has shape \(2,\)")),
    Case("optim-update-grads-wrong-shape-traced",
         lambda: rm.jit(rm.optim.sgd(0.1).update)({"w": rm.ones((3,)), "b": 0.0}, rm.optim.sgd(0.1).init(P), P),
         rm.ShapeError, (r"^sgd\.update:", r"grads\['w'\] has shape \(3,\)")),
    Case("optim-update-arguments-swapped", lambda: rm.optim.adam(1e-3).update(P, P, P), T,
         (r"^adam\.update:", r"state must be the AdamState", r"opt\.update\(grads, state, params\)")),
    Case("optim-update-state-of-another-optimizer",
         lambda: _update(rm.optim.adam(1e-3), state=rm.optim.sgd(0.1).init(P)), T,
         (r"^adam\.update:", r"AdamState", r"SgdState")),
    Case("optim-update-momentum-other-structure",
         lambda: _update(rm.optim.sgd(0.1, momentum=0.9), state=rm.optim.SgdState(rm.asarray(0), {"w": rm.ones((2,))})),
         V, (r"^sgd\.update:", r"state\.momentum has the structure")),
    Case("optim-update-integer-grads", lambda: _update(rm.optim.sgd(0.1), grads={"w": rm.asarray([1, 2]), "b": 0.0}),
         rm.DTypeError, (r"^sgd\.update:", r"grads\['w'\] has dtype int32")),
    Case("optim-init-integer-param", lambda: rm.optim.adam(1e-3).init({"w": rm.ones((2,)), "step": rm.asarray(3)}),
         rm.DTypeError, (r"^adam\.init:", r"params\['step'\] has dtype int32", r"float parameters only")),
    Case("optim-init-string-param", lambda: rm.optim.adamw(1e-3).init({"w": "abc"}), T,
         (r"^adamw\.init:", r"params\['w'\] is a str", r"not an array")),
]
