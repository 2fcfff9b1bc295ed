"""patches/layer_ids.py on stand-in model objects (no SGLang): the tries, undoing per-layer flags,
ambiguous capture lists, and the refusal."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from patches import layer_ids


class Model:
    """A model whose set_eagle3_layers_to_capture follows ``rule`` and flags captured layers."""

    def __init__(self, rule, n=8):
        self.rule = rule
        self.inner = SimpleNamespace(layers_to_capture=[])
        self.layers = [SimpleNamespace() for _ in range(n)]

    def modules(self):
        return [self, self.inner, *self.layers]

    def set_eagle3_layers_to_capture(self, ids):
        self.inner.layers_to_capture = self.rule(ids)
        for i in self.inner.layers_to_capture:
            self.layers[i]._is_layer_to_capture = True


def plus_one(ids):
    return [i + 1 for i in ids]


def deepseek(ids):
    return plus_one(ids) if ids[0] == 1 else list(ids)


def flagged(m):
    return [i for i, layer in enumerate(m.layers) if getattr(layer, "_is_layer_to_capture", False)]


def test_plus_one_classes_take_the_ids():
    m = Model(plus_one)
    assert layer_ids.configure(m, [0, 2, 5]) == [0, 2, 5]
    assert m.inner.layers_to_capture == [1, 3, 6] and flagged(m) == [1, 3, 6]


def test_deepseek_rule_gets_capture_points_and_the_first_try_leaves_no_flag():
    m = Model(deepseek)
    assert layer_ids.configure(m, [2, 3, 5]) == [3, 4, 6]
    assert m.inner.layers_to_capture == [3, 4, 6]
    assert flagged(m) == [3, 4, 6]  # not also 2, 3, 5 from the first try


def test_inexpressible_ids_are_refused_naming_what_each_try_gave():
    with pytest.raises(
        layer_ids.LayerIdsError, match=r"\[0, 2, 5\] -> \[0, 2, 5\]; \[1, 3, 6\] -> \[2, 4, 7\]"
    ):
        layer_ids.configure(Model(deepseek), [0, 2, 5])


def test_two_different_capture_lists_are_refused():
    m = Model(plus_one)
    m.other = SimpleNamespace(layers_to_capture=[9])
    m.modules = lambda: [m, m.inner, m.other]
    with pytest.raises(layer_ids.LayerIdsError, match="several capture lists"):
        layer_ids.configure(m, [0, 2, 5])
