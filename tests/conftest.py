"""Shared fixtures: tiny random HF Llama checkpoints written with save_pretrained (safetensors)."""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(min(2, torch.get_num_threads()))

from tests.llama_fixtures import make_llama


@pytest.fixture(scope="session")
def llama_checkpoint(tmp_path_factory):
    """Factory: ``llama_checkpoint(name) -> (dir, hf_model)``, cached per session."""
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            d = tmp_path_factory.mktemp(f"llama_{name}")
            cache[name] = (d, make_llama(d, name))
        return cache[name]

    return get
