"""Run in the SGLang CPU venv: call every model class's real ``set_eagle3_layers_to_capture``
from the pinned wheel on a stand-in model object, through ``patches.layer_ids.configure``,
and print, per class and id set, what the stock call captures and what hsx makes it capture.

Usage: python layer_ids_probe.py NUM_LAYERS...  (prints one JSON object, by layer count: one
import of every model module serves them all)
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from types import SimpleNamespace

from patches import layer_ids


class Inner:
    def __init__(self, n: int):
        self.layers_to_capture = None
        self.layers = [SimpleNamespace() for _ in range(n)]

    def set_eagle3_layers_to_capture(self, ids):  # classes that hand the points to their inner model
        self.layers_to_capture = list(ids)


class StandIn:
    """Just what the methods read: pp rank, layer count, inner model, language model."""

    def __init__(self, n: int, impl, language_model=None):
        self.pp_group = SimpleNamespace(is_last_rank=True)
        self.config = SimpleNamespace(num_hidden_layers=n, text_config=SimpleNamespace(num_hidden_layers=n))
        self.model = Inner(n)
        self.layers = [SimpleNamespace() for _ in range(n)]
        self.language_model = language_model
        self._impl = impl

    def set_eagle3_layers_to_capture(self, ids=None):
        return self._impl(self, ids)

    def modules(self):
        yield self
        yield self.model
        yield from self.model.layers
        yield from self.layers
        if self.language_model is not None:
            yield from self.language_model.modules()


def classes():
    import sglang.srt.models as pkg

    for m in pkgutil.iter_modules(pkg.__path__):
        try:
            mod = importlib.import_module(f"sglang.srt.models.{m.name}")
        except Exception:  # noqa: BLE001 - SGLang itself skips models whose kernels are missing
            continue
        for obj in vars(mod).values():
            if (
                isinstance(obj, type)
                and obj.__module__ == mod.__name__
                and "set_eagle3_layers_to_capture" in vars(obj)
            ):
                yield mod, obj


def main(n: int) -> dict:
    from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM
    from sglang.srt.models.llama import LlamaForCausalLM

    lm_impl = {
        "kimi_k25": vars(DeepseekV2ForCausalLM)["set_eagle3_layers_to_capture"],
    }
    id_sets = [[1, n // 2 - 1, n - 4], [0, 2, 5], [2, 3, 5], [3, n // 2, n - 2]]
    out = {}
    for mod, cls in classes():
        impl = vars(cls)["set_eagle3_layers_to_capture"]
        inner_impl = lm_impl.get(
            mod.__name__.rsplit(".", 1)[1], vars(LlamaForCausalLM)["set_eagle3_layers_to_capture"]
        )
        if hasattr(mod, "get_parallel"):
            mod.get_parallel = lambda: SimpleNamespace(pp_group=SimpleNamespace(is_last_rank=True))
        row = {}
        for ids in id_sets:
            model = StandIn(n, impl, StandIn(n, inner_impl))
            key = ",".join(map(str, ids))
            try:
                model.set_eagle3_layers_to_capture(list(ids))
                stock = layer_ids.read_capture(model)
                arg = layer_ids.configure(model, ids, cls.__name__)
                flagged = [
                    i for i, m in enumerate(model.model.layers) if getattr(m, "_is_layer_to_capture", False)
                ]
                row[key] = {
                    "stock": stock,
                    "arg": arg,
                    "captured": layer_ids.read_capture(model),
                    "flagged": flagged,
                }
            except layer_ids.LayerIdsError as e:
                row[key] = {"stock": stock, "refused": str(e)}
            except Exception as e:  # noqa: BLE001 - a method the stand-in cannot drive is reported
                row[key] = {"error": f"{type(e).__name__}: {e}"}
        out[f"{mod.__name__.rsplit('.', 1)[1]}.{cls.__name__}"] = row
    return out


if __name__ == "__main__":
    print(json.dumps({n: main(int(n)) for n in sys.argv[1:]}))
