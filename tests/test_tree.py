import dataclasses
from collections import namedtuple

import pytest

import remat as rm

Point = namedtuple("Point", "x y")


@dataclasses.dataclass
class Params:
    w: object
    b: object


TREES = [
    1.0,
    None,
    (1, 2),
    [1, (2, 3), []],
    {"b": 1, "a": [2, 3]},
    Point(1, (2, 3)),
    Params(w=[1, 2], b={"k": 3}),
    {"p": Params(Point(1, 2), None), "q": (None, 4)},
]


@pytest.mark.parametrize("tree", TREES, ids=repr)
def test_round_trip(tree):
    leaves, td = rm.tree.flatten(tree)
    assert rm.tree.unflatten(td, leaves) == tree
    assert td.num_leaves == len(leaves)


def test_dict_keys_are_visited_sorted():
    assert rm.tree.leaves({"b": 1, "a": 2, "c": 3}) == [2, 1, 3]


def test_none_has_no_leaves():
    assert rm.tree.leaves((None, 1, None)) == [1]


def test_namedtuple_and_dataclass_keep_their_type():
    out = rm.tree.map(lambda v: v * 10, {"p": Point(1, 2), "d": Params(3, 4)})
    assert out == {"p": Point(10, 20), "d": Params(30, 40)}


def test_structures_compare_by_shape():
    assert rm.tree.flatten({"a": 1, "b": 2})[1] == rm.tree.flatten({"b": 5, "a": 6})[1]
    assert rm.tree.flatten((1, 2))[1] != rm.tree.flatten([1, 2])[1]


def test_wrong_number_of_leaves():
    _, td = rm.tree.flatten((1, 2))
    with pytest.raises(ValueError, match="too few leaves"):
        rm.tree.unflatten(td, [1])
    with pytest.raises(ValueError, match="too many leaves"):
        rm.tree.unflatten(td, [1, 2, 3])


def test_partition_picks_leaves_and_rebuilds_around_them():
    part = rm.tree.partition({"a": 1, "b": ("x", 2.5), "c": None}, lambda x: isinstance(x, (int, float)))
    assert part.picked == [1, 2.5] and part.positions == (0, 2)
    assert part.rebuild([10, 20]) == {"a": 10, "b": ("x", 20), "c": None}
