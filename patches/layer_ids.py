"""Make SGLang capture exactly the layers hsx names, whatever the model class's convention.

hsx ids follow SpecForge: id ``i`` is the output of decoder layer ``i``, which SGLang
captures at the input of layer ``i + 1`` (``layers_to_capture = [i + 1, ...]``). The model
classes of the pinned SGLang disagree on the argument that gets there: Llama, Qwen and most
others add 1 to every id; DeepSeek-V2/V3 (and Kimi-K2.5, which passes the call through) add 1
only when the first id is 1 and otherwise take the ids as capture points; gpt-oss takes them
as given when the largest is the layer count. A wrong guess captures each layer one off, with
the right shapes and no error. So the real method is called and its result read back: the
ids first, then the capture points themselves; neither giving the wanted points is refused.
"""

from __future__ import annotations

from runner.contract.errors import HsxError


class LayerIdsError(HsxError, ValueError):
    """The model class cannot capture the requested layers."""


def capture_points(ids: list[int]) -> list[int]:
    return [i + 1 for i in ids]


def _modules(model):
    return list(model.modules()) if hasattr(model, "modules") else [model]


def read_capture(model) -> list[int] | None:
    """The capture points the model's set_eagle3_layers_to_capture left behind: the one
    non-empty ``layers_to_capture`` among its modules (None when there is none)."""
    found = {
        tuple(int(x) for x in got) for m in _modules(model) if (got := getattr(m, "layers_to_capture", None))
    }
    if len(found) > 1:
        raise LayerIdsError(f"{type(model).__name__} holds several capture lists: {sorted(found)}")
    return list(found.pop()) if found else None


def clear_flags(model) -> None:
    """Undo a try: some classes also flag each captured layer (``_is_layer_to_capture``)."""
    for m in _modules(model):
        if getattr(m, "_is_layer_to_capture", False):
            m._is_layer_to_capture = False


def configure(model, ids, name: str = "") -> list[int]:
    """Call the model's set_eagle3_layers_to_capture with the argument that makes it capture the
    outputs of ``ids``; return that argument. Raises LayerIdsError naming what each try gave."""
    name = name or type(model).__name__
    ids = [int(i) for i in ids]
    want = capture_points(ids)
    tried = []
    for arg in (ids, want):
        clear_flags(model)
        model.set_eagle3_layers_to_capture(list(arg))
        got = read_capture(model)
        if got == want:
            return arg
        tried.append(f"{arg} -> {got}")
    raise LayerIdsError(
        f"SGLang's {name} cannot capture the outputs of layers {ids} (capture points {want}); "
        f"its set_eagle3_layers_to_capture gave {'; '.join(tried)}. Choose other [job] aux_layer_ids "
        "(for DeepSeek-V3/Kimi a smallest id of 0 cannot be expressed)"
    )
