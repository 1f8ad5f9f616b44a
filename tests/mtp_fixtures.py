"""Tiny checkpoints carrying random multi-token-prediction heads (imported as tests.mtp_fixtures).

The MTP tensors are laid out as released checkpoints store them: DeepSeek-V3 ``model.layers.{num_hidden_layers}.*``
(a decoder layer + ``enorm``/``hnorm``/``eh_proj``/``shared_head.{norm,head}``/``embed_tokens``), Qwen3-Next / Qwen3.5
``mtp.*`` (``fc``, ``pre_fc_norm_embedding``, ``pre_fc_norm_hidden``, ``layers.0.*``, ``norm``). The decoder layer's
tensors come from a one-layer-deeper HF model of the same config (so its names and layout are the library's), saved
into a second shard listed by a ``model.safetensors.index.json``.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tests.deepseek_fixtures import make_deepseek
from tests.qwen3_next_fixtures import CASES as QWEN_CASES, make_qwen3_next


def _deeper_layer(make, name: str, layers: int, seed: int, **overrides):
    """Saved tensors of decoder layer ``layers`` of a (layers + 1)-layer HF model of case ``name`` (``make``: the
    fixture maker), and that layer's in-memory state dict (HF's own parameter layout, for transformers' MtpModel)."""
    with tempfile.TemporaryDirectory() as tmp:
        deeper = make(tmp, name, seed=seed, num_hidden_layers=layers + 1, **overrides)
        tensors = {}
        for f in Path(tmp).glob("*.safetensors"):
            tensors.update(load_file(f))
    prefix = f"model.layers.{layers}."
    return ({k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)},
            deeper.model.layers[layers].state_dict())


def _finish(path: Path, extra: dict[str, torch.Tensor], config_updates: dict) -> None:
    """Write ``extra`` as a second shard, index both, and update config.json."""
    path = Path(path)
    shards = sorted(path.glob("*.safetensors"))
    weight_map = {}
    for f in shards:
        weight_map.update({k: f.name for k in load_file(f)})
    save_file({k: v.contiguous() for k, v in extra.items()}, str(path / "mtp.safetensors"), metadata={"format": "pt"})
    weight_map.update({k: "mtp.safetensors" for k in extra})
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    cfg_path = path / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update(config_updates)
    cfg_path.write_text(json.dumps(cfg, indent=2))


def _rand(*shape, std=0.05, mean=0.0):
    return torch.randn(*shape) * std + mean


def make_deepseek_mtp(path, name: str = "v3", seed: int = 0, drop: tuple[str, ...] = (), make=make_deepseek,
                      **overrides):
    """A tiny DeepSeek-layout checkpoint (DeepSeek V3/V3.2, GLM-5, or GLM-4.5 with ``make=tests.moe_fixtures.
    make_moe``) with a random MTP layer at index num_hidden_layers; ``drop``: MTP tensor suffixes left out
    (missing-tensor tests). Returns the fp32 HF model (main layers only)."""
    model = make(path, name, seed=seed, **overrides)
    cfg = model.config
    n = cfg.num_hidden_layers
    gen = torch.Generator().manual_seed(seed + 1000)
    torch.manual_seed(seed + 1000)
    layer, block_state = _deeper_layer(make, name, n, seed + 1, **overrides)
    h, v = cfg.hidden_size, cfg.vocab_size
    layer.update({
        "enorm.weight": _rand(h, std=0.2, mean=1.0), "hnorm.weight": _rand(h, std=0.2, mean=1.0),
        "eh_proj.weight": torch.randn(h, 2 * h, generator=gen) / (2 * h) ** 0.5,
        "shared_head.norm.weight": _rand(h, std=0.2, mean=1.0),
        # copies of the main embedding / head, as released checkpoints carry them
        "embed_tokens.weight": model.model.embed_tokens.weight.detach().clone(),
        "shared_head.head.weight": model.lm_head.weight.detach().clone(),
    })
    extra = {f"model.layers.{n}.{k}": t for k, t in layer.items() if not k.endswith(drop)}
    _finish(path, extra, {"num_nextn_predict_layers": 1})
    # transformers' MtpModel names: layers.0.{enorm,hnorm,eh_proj,post_norm (= shared_head.norm),mtp_block.*}
    model.mtp_state = {f"layers.0.mtp_block.{k}": t for k, t in block_state.items()}
    model.mtp_state.update({f"layers.0.{k}": layer[k] for k in ("enorm.weight", "hnorm.weight", "eh_proj.weight")})
    model.mtp_state["layers.0.post_norm.weight"] = layer["shared_head.norm.weight"]
    return model


def make_qwen3_next_mtp(path, name: str = "qwen3_next", seed: int = 0, drop: tuple[str, ...] = ()):
    """A tiny Qwen3-Next / Qwen3.5 checkpoint with a random ``mtp.*`` head (one full-attention layer)."""
    model = make_qwen3_next(path, name, seed=seed)
    cfg = model.config
    n = cfg.num_hidden_layers
    kwargs = dict(QWEN_CASES[name][2])
    layer_types = list(kwargs["layer_types"]) + ["full_attention"]
    torch.manual_seed(seed + 1000)
    with tempfile.TemporaryDirectory() as tmp:
        import transformers

        cfg_cls, model_cls, _, _ = QWEN_CASES[name]
        deeper = getattr(transformers, model_cls)(
            getattr(transformers, cfg_cls)(**{**kwargs, "num_hidden_layers": n + 1, "layer_types": layer_types}))
        with torch.no_grad():
            for k, t in deeper.named_parameters():
                if k.endswith("norm.weight") or "layernorm" in k:
                    t.normal_(0, 0.2)
        deeper.save_pretrained(tmp)
        block = deeper.model.layers[n]
        tensors = {}
        for f in Path(tmp).glob("*.safetensors"):
            tensors.update(load_file(f))
    prefix = f"model.layers.{n}."
    h = cfg.hidden_size
    extra = {f"mtp.layers.0.{k[len(prefix):]}": t for k, t in tensors.items() if k.startswith(prefix)}
    extra.update({
        # zero-centred norms: the stored weight is the offset from one
        "mtp.pre_fc_norm_embedding.weight": _rand(h, std=0.2), "mtp.pre_fc_norm_hidden.weight": _rand(h, std=0.2),
        "mtp.fc.weight": torch.randn(h, 2 * h) / (2 * h) ** 0.5, "mtp.norm.weight": _rand(h, std=0.2),
    })
    model.mtp_block = block  # the HF decoder layer whose tensors are mtp.layers.0.* (hand-written reference)
    model.mtp_tensors = dict(extra)
    extra = {k: t for k, t in extra.items() if not k.endswith(drop)}
    _finish(path, extra, {"mtp_num_hidden_layers": 1})
    return model
