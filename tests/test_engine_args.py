"""EngineArgs: every LLM argument in one typed object, validated before anything is spawned, read or allocated, with
one-line errors naming the argument; LLM(...) takes exactly its fields."""
from __future__ import annotations

import dataclasses
import inspect

import pytest

from modelgen.runtime.engine.args import EngineArgs
from modelgen.runtime.engine.llm import LLM


@pytest.mark.parametrize("name, value", [
    ("block_size", 0), ("block_size", True), ("max_num_seqs", -1), ("num_blocks", 0), ("max_model_len", 2.5),
    ("max_num_batched_tokens", "64"), ("tensor_parallel_size", 0), ("pipeline_parallel_size", None),
    ("data_parallel_size", 0), ("mlp_data_parallel_size", 0), ("expert_parallel_size", 0),
    ("kv_cache_memory_cap", 0), ("speculative_tokens", 9), ("speculative_tokens", True),
])
def test_a_bad_size_is_refused_naming_the_argument(name, value):
    with pytest.raises(ValueError, match=f"^{name} = ") as info:
        EngineArgs(model="ckpt", **{name: value}).validate()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name, value", [("load_format", "pickle"), ("check_finite", "sometimes")])
def test_a_bad_choice_is_refused_naming_the_argument(name, value):
    with pytest.raises(ValueError, match=name):
        EngineArgs(model="ckpt", **{name: value}).validate()


def test_model_and_its_old_name_checkpoint():
    assert EngineArgs(checkpoint="ckpt").validate().model == "ckpt"
    with pytest.raises(TypeError, match="not both"):
        EngineArgs(model="a", checkpoint="b").validate()
    with pytest.raises(TypeError, match="give the checkpoint"):
        EngineArgs().validate()


def test_defaults_validate_and_as_dict_has_every_field():
    args = EngineArgs(model="ckpt").validate()
    assert args.as_dict() == {f.name: getattr(args, f.name) for f in dataclasses.fields(EngineArgs)}
    assert args.as_dict()["block_size"] == 16 and args.as_dict()["checkpoint"] is None


def test_llm_validates_before_reading_the_checkpoint(tmp_path):
    # The directory does not exist: the argument error comes first, without touching it.
    with pytest.raises(ValueError, match="^block_size = 0"):
        LLM(tmp_path / "missing", block_size=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'blocksize'"):
        LLM(tmp_path / "missing", blocksize=4)


def test_llm_signature_is_the_engine_args():
    params = inspect.signature(LLM.__init__).parameters
    assert [n for n in params if n != "self"] == [f.name for f in dataclasses.fields(EngineArgs)]
    assert [n for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD] == ["self", "model", "target", "dtype",
                                                                                  "device"]
    assert all(params[f.name].default == f.default for f in dataclasses.fields(EngineArgs))


def test_the_engine_keeps_its_arguments(llama_checkpoint):
    path, _ = llama_checkpoint("gqa")
    llm = LLM(path, dtype="float32", max_model_len=32, block_size=8, num_blocks=9, max_num_seqs=3)
    assert (llm.args.block_size, llm.args.num_blocks, llm.args.max_num_seqs) == (8, 9, 3)
    assert (llm.blocks.block_size, llm.blocks.num_blocks, llm.max_num_seqs, llm.max_model_len) == (8, 9, 3, 32)
