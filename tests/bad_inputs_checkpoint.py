"""Bad inputs to rm.checkpoint, rm.remat, rm.checkpoint_sequential, rm.checkpoint_name and the
policies (issue 13's API: static arguments, keyword inputs, prevent_cse, the decorator factory)."""

from __future__ import annotations

import remat as rm
from bad_inputs import Case

X = rm.asarray([1.0, 2.0])
P = rm.policies
AT = r"\(at bad_inputs_checkpoint\.py:\d+\)"


def _identity(h):
    return h


CASES: list[Case] = [
    # static_argnums
    Case("checkpoint-static-argnums-a-str", lambda: rm.checkpoint(_identity, X, static_argnums="a"),
         rm.ArgumentTypeError, (r"^checkpoint:", r"static_argnums must be an int or a tuple of ints", r"got 'a'")),
    Case("checkpoint-static-argnums-out-of-range", lambda: rm.checkpoint(_identity, X, static_argnums=3),
         rm.ArgumentTypeError, (r"^checkpoint:", r"static_argnums=3 is out of range", r"_identity takes 1 "
                                r"positional argument \(h\)", AT)),
    Case("checkpoint-static-argnums-beyond-the-call", lambda: rm.checkpoint(lambda *h: h[0], X, static_argnums=3),
         rm.ArgumentTypeError, (r"^checkpoint:", r"static_argnums=3 needs at least 4 positional arguments",
                                r"called with 1")),
    Case("checkpoint-remat-static-argnums-repeated", lambda: rm.remat(_identity, static_argnums=(0, 0)),
         rm.ArgumentValueError, (r"^remat:", r"static_argnums=\(0, 0\)", r"more than once")),
    Case("checkpoint-remat-factory-static-argnums-out-of-range", lambda: rm.remat(static_argnums=(1,))(_identity),
         rm.ArgumentTypeError, (r"^remat:", r"static_argnums=\(1,\) is out of range", r"_identity")),
    # prevent_cse
    Case("checkpoint-prevent-cse-a-str", lambda: rm.checkpoint(_identity, X, prevent_cse="no"),
         rm.ArgumentTypeError, (r"^checkpoint:", r"prevent_cse must be True, False or a sequence", r"got 'no'")),
    Case("checkpoint-prevent-cse-too-few-flags", lambda: rm.checkpoint(lambda a, b: a * b, X, X, prevent_cse=(True,)),
         rm.ArgumentValueError, (r"^checkpoint:", r"prevent_cse has 1 flags for 2 arguments")),
    Case("checkpoint-prevent-cse-structure", lambda: rm.checkpoint(lambda ab: ab[0] * ab[1], (X, X),
                                                                   prevent_cse=((True, False, True),)),
         rm.ArgumentValueError, (r"^checkpoint:", r"flag of structure", r"does not match its argument")),
    Case("checkpoint-prevent-cse-sequence-and-tensor-keyword",
         lambda: rm.checkpoint(lambda a, scale: a * scale, X, scale=X, prevent_cse=(False,)),
         rm.ArgumentValueError, (r"^checkpoint:", r"covers the positional arguments", r"by keyword")),
    Case("checkpoint-remat-prevent-cse-an-int", lambda: rm.remat(prevent_cse=1), rm.ArgumentTypeError,
         (r"^remat:", r"prevent_cse must be True, False or a sequence", r"got 1")),
    # the decorator factory checks its settings when made
    Case("checkpoint-remat-factory-policy-a-str", lambda: rm.remat(policy="dots_saveable"), rm.ArgumentValueError,
         (r"^remat:", r"policy='dots_saveable' is a string", r"rm\.policies\.dots_saveable")),
    # keyword inputs and the body's outputs
    Case("checkpoint-unknown-keyword", lambda: rm.checkpoint(_identity, X, scale=2.0), rm.ArgumentTypeError,
         (r"^checkpoint:", r"_identity cannot be called with 1 inputs and keywords 'scale'",
          r"unexpected keyword argument 'scale'")),
    Case("checkpoint-missing-argument", lambda: rm.checkpoint(lambda h, w: h * w, X), rm.ArgumentTypeError,
         (r"^checkpoint:", r"<lambda> cannot be called with 1 inputs", r"missing a required argument: 'w'")),
    Case("checkpoint-body-returns-a-str-beside-a-tensor", lambda: rm.checkpoint(lambda h: {"y": h, "s": "tag"}, X),
         rm.ArgumentTypeError, (r"^checkpoint:", r"the body <lambda> returned a str",
                                r"Python numbers and None pass through")),
    Case("checkpoint-traced-body-returns-an-object",
         lambda: rm.grad(lambda x: rm.sum(rm.checkpoint(lambda h: (h, object()), x)[0]))(X),
         rm.ArgumentTypeError, (r"^checkpoint:", r"the body <lambda> returned a object")),
    # checkpoint_sequential
    Case("checkpoint-sequential-zero-segments", lambda: rm.checkpoint_sequential([rm.sin], 0, X),
         rm.ArgumentValueError, (r"^checkpoint_sequential:", r"segments=0", r"number of functions, 1")),
    Case("checkpoint-sequential-more-segments-than-functions", lambda: rm.checkpoint_sequential([rm.sin, rm.cos], 3, X),
         rm.ArgumentValueError, (r"^checkpoint_sequential:", r"segments=3", r"number of functions, 2",
                                 r"segments <= len\(functions\)")),
    Case("checkpoint-sequential-segments-a-float", lambda: rm.checkpoint_sequential([rm.sin, rm.cos], 1.5, X),
         rm.ArgumentTypeError, (r"^checkpoint_sequential:", r"segments must be an int", r"got 1\.5")),
    Case("checkpoint-sequential-segments-a-bool", lambda: rm.checkpoint_sequential([rm.sin, rm.cos], True, X),
         rm.ArgumentTypeError, (r"^checkpoint_sequential:", r"segments must be an int", r"got True")),
    Case("checkpoint-sequential-functions-one-callable", lambda: rm.checkpoint_sequential(rm.sin, 1, X),
         rm.ArgumentTypeError, (r"^checkpoint_sequential:", r"functions must be a sequence of callables",
                                r"got a function")),
    Case("checkpoint-sequential-a-non-callable", lambda: rm.checkpoint_sequential([rm.sin, 3], 1, X),
         rm.ArgumentTypeError, (r"^checkpoint_sequential:", r"callable at functions\[1\]", r"got int 3")),
    # policies
    Case("checkpoint-both-policies-a-str", lambda: P.save_from_both_policies(P.dots_saveable, "dots_saveable"),
         rm.ArgumentValueError, (r"^save_from_both_policies: second:", r"policy='dots_saveable' is a string",
                                 r"rm\.policies\.dots_saveable")),
    Case("checkpoint-both-policies-none", lambda: P.save_from_both_policies(None, P.dots_saveable),
         rm.ArgumentTypeError, (r"^save_from_both_policies:", r"first is None", r"rm\.policies\.nothing_saveable")),
    Case("checkpoint-both-policies-a-factory",
         lambda: P.save_from_both_policies(P.save_only_these_names, P.dots_saveable), rm.ArgumentTypeError,
         (r"^save_from_both_policies: first:", r"rm\.policies\.save_only_these_names is the policy factory",
          r"call it with the names")),
    Case("checkpoint-both-policies-unused-name",
         lambda: rm.grad(lambda x: rm.sum(rm.checkpoint(
             lambda h: rm.checkpoint_name(rm.sin(h), "hidden"), x,
             policy=P.save_from_both_policies(P.dots_saveable, P.save_only_these_names("hiden")))))(X),
         None, (r"save_only_these_names\('hiden'\)", r"names 'hiden'", r"names in the body: 'hidden'"),
         warns=P.UnusedNameWarning),
    # checkpoint_name
    Case("checkpoint-name-not-a-str", lambda: rm.checkpoint_name(X, 3), rm.ArgumentTypeError,
         (r"^checkpoint_name:", r"name must be a str", r"got int 3")),
    Case("checkpoint-name-pytree-with-a-str-leaf", lambda: rm.checkpoint_name({"a": "b"}, "n"), rm.ArgumentTypeError,
         (r"^asarray:", r"value of type str")),
]
