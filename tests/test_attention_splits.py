"""The paged decode's context-split rule (``runtime/layers/attention/kernels.decode_splits``): splits only while the
(sequence, KV head) programs leave SMs idle; one split once they cover every SM (``SPLIT_ONE_WAVE``)."""
from __future__ import annotations

import pytest
import torch

from modelgen.runtime.layers.attention import kernels as ga

H200_SMS = 132


@pytest.fixture
def h200(monkeypatch):
    monkeypatch.setattr(ga, "num_sms", lambda index: H200_SMS)


@pytest.mark.parametrize("one_wave", [True, False])
def test_splits_stop_once_the_programs_cover_the_gpu(h200, monkeypatch, one_wave):
    monkeypatch.setattr(ga, "SPLIT_ONE_WAVE", one_wave)
    cpu = torch.device("cpu")
    # Llama-3-8B batch 32: 32 x 8 = 256 programs >= 132 SMs -> no split (the rule before: ceil(264 / 256) = 2).
    assert ga.decode_splits(32, 8, 4096, cpu) == (1 if one_wave else 2)
    # Below one wave nothing changes: batch 8 (64 programs) and batch 1 (8 programs) still split to cover twice.
    assert ga.decode_splits(8, 8, 4096, cpu) == 5
    assert ga.decode_splits(1, 8, 4096, cpu) == 33
    # Never more splits than context blocks, never more than 64.
    assert ga.decode_splits(1, 1, 128, cpu) == 2
    assert ga.decode_splits(1, 1, 1 << 20, cpu) == 64
    # 131 programs leave one SM idle: still split.
    assert ga.decode_splits(131, 1, 4096, cpu) == 3
