"""hsx's Kimi-K2.5-shaped config fixture: the wrapper's config class, shipped beside the
weights and named by ``auto_map`` as the hub's checkpoint ships its own. ``text_config`` is a
DeepSeek-V3; ``vision_config`` stays a plain dict (only SGLang's own class reads it)."""

from transformers import DeepseekV3Config, PretrainedConfig


class KimiK25Config(PretrainedConfig):
    model_type = "kimi_k25"

    def __init__(self, text_config=None, vision_config=None, **kwargs):
        if isinstance(text_config, dict):
            text_config = DeepseekV3Config(**{k: v for k, v in text_config.items() if k != "model_type"})
        self.text_config = text_config if text_config is not None else DeepseekV3Config()
        self.vision_config = dict(vision_config or {})
        super().__init__(**kwargs)
