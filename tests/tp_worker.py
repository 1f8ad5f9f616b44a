"""Process body of the tensor-parallel test (importable so torch.multiprocessing can spawn it)."""
from __future__ import annotations

import json


def run_rank(rank: int, world: int, init_file: str, checkpoint: str, target: str, prompt: list[int], out: str) -> None:
    import torch
    import torch.distributed as dist
    from safetensors.torch import save_file

    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        llm = LLM(checkpoint, target=target, dtype="float32", max_model_len=64)
        logits = llm.score(prompt).contiguous()
        tokens = llm.generate([prompt], SamplingParams(max_new_tokens=8, ignore_eos=True))[0]
        save_file({"logits": logits}, f"{out}.rank{rank}.safetensors")
        with open(f"{out}.rank{rank}.json", "w") as f:
            json.dump({"tokens": tokens, "kv_heads": llm.model.get_kv_spec().layers[0].num_kv_heads}, f)
    finally:
        dist.destroy_process_group()


def run_rank_targets(rank: int, world: int, init_file: str, checkpoint: str, targets: list[str], prompt: list[int],
                     out: str, max_model_len: int = 256) -> None:
    """:func:`run_rank` for several targets in one process group (one spawn, one import of torch and modelgen per rank
    instead of one per target): ``{out}.{target}.rank{rank}.safetensors`` / ``.json`` per target."""
    import torch
    import torch.distributed as dist
    from safetensors.torch import save_file

    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        for target in targets:
            llm = LLM(checkpoint, target=target, dtype="float32", max_model_len=max_model_len)
            logits = llm.score(prompt).contiguous()
            tokens = llm.generate([prompt], SamplingParams(max_new_tokens=8, ignore_eos=True))[0]
            save_file({"logits": logits}, f"{out}.{target}.rank{rank}.safetensors")
            first = llm.model.get_kv_spec().layers[0]
            with open(f"{out}.{target}.rank{rank}.json", "w") as f:
                json.dump({"tokens": tokens, "kv_heads": getattr(first, "num_kv_heads", None)}, f)
            llm.close()
    finally:
        dist.destroy_process_group()
