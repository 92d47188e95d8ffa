"""LoRA adapters through peft: wrap a model for training, merge the adapters for export.

    model = apply_lora(model, cfg.model.lora)   # only adapter params require grad
    plain = merge_lora(model)                   # a plain HF model with the adapters folded in
"""

from __future__ import annotations

from posttrain.config.common import LoraConfig
from posttrain.core.errors import ConfigError


def apply_lora(model, cfg: LoraConfig, *, modules_to_save: list[str] | None = None):
    """Wrap `model` in LoRA adapters; `modules_to_save` train in full beside them (a reward
    model's new `score` head)."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [t for t in cfg.target_modules if t not in names]
    if missing:
        raise ConfigError(
            f"model.lora.target_modules: {', '.join(missing)} not found in the model "
            f"(linear layers include: {', '.join(sorted(n for n in names if n.endswith('proj'))[:12])})"
        )
    peft_cfg = PeftLoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules),
        bias="none",
        task_type="SEQ_CLS" if modules_to_save else "CAUSAL_LM",
        modules_to_save=modules_to_save,
    )
    return get_peft_model(model, peft_cfg)


def is_lora(model) -> bool:
    return hasattr(model, "merge_and_unload") and hasattr(model, "peft_config")


def merge_lora(model):
    """The plain model with adapters merged (a non-LoRA model is returned unchanged)."""
    return model.merge_and_unload() if is_lora(model) else model


def trainable_parameters(model) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return trainable, total
