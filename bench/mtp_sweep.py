"""Speculative greedy decoding equals plain greedy decoding on checkpoints beyond the tests' (issue 11's "done when").

For tiny random checkpoints of every MTP family and variant the fixtures can build -- DeepSeek V3 (with and without
``q_lora_rank``, half-split RoPE + attention bias, YaRN), V3.2 and GLM-5 (dense and sparse DSA), Qwen3-Next and
Qwen3.5 (dense and MoE) -- each with a random MTP head under seeds the tests do not use, both targets (rocm, neuron),
K = 1, 2, 3, a batch of prompts of mixed lengths drawn per case: plain greedy tokens against speculative ones, with
the acceptance rate. Two draft sources per K: the checkpoint's random head (accepts little: rejection paths) and
"oracle" drafts -- the head's proposals replaced by the plain continuation with a seeded ~30% of them corrupted --
so long accepted runs, partial acceptances, requests ending inside a run and (Qwen3-Next / Qwen3.5) recurrent-state
rollbacks all occur. float32 on the CPU; the JSON lists every case.

  python bench/mtp_sweep.py --out bench/results/cpu-mtp-sweep.json
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from modelgen.runtime.engine.llm import LLM  # noqa: E402
from modelgen.runtime.engine.sampler import SamplingParams  # noqa: E402

# glm5_sparse is left out: its fixture lists mlp_layer_types for exactly its 3 layers, so the one-layer-deeper model
# the MTP block is cut from cannot be built (transformers validates the list's length).
DEEPSEEK = ["v3", "v3_no_q_lora", "v3_rotate_half", "v3_yarn", "v32_dense", "v32_sparse", "glm5_dense"]
QWEN = ["qwen3_next", "qwen3_next_dense_layer", "qwen3_5", "qwen3_5_moe"]


def build(path: Path, name: str, seed: int):
    from tests.mtp_fixtures import make_deepseek_mtp, make_qwen3_next_mtp

    if name in QWEN:
        return make_qwen3_next_mtp(path, name, seed=seed)
    return make_deepseek_mtp(path, name, seed=seed)


class OracleDrafts:
    """Replace each request's drafts, after every draft pass, by the reference continuation with some corrupted."""

    def __init__(self, refs: dict[tuple[int, ...], list[int]], vocab: int, seed: int, p_wrong: float = 0.3):
        from modelgen.runtime.engine.speculative import SpeculativeDecoder

        self.cls, self.refs, self.vocab = SpeculativeDecoder, refs, vocab
        self.gen = torch.Generator().manual_seed(seed)
        self.p_wrong = p_wrong

    def __enter__(self):
        original = self.original = self.cls._draft
        oracle = self

        def drafted(dec, batch, *a):
            original(dec, batch, *a)
            for r in batch:
                if r.seq_id not in dec.drafted:
                    continue
                n = len(r.output)
                want = oracle.refs[tuple(r.prompt)][n : n + len(dec.drafted[r.seq_id].tokens)]
                wrong = torch.rand(len(want), generator=oracle.gen) < oracle.p_wrong
                dec.drafted[r.seq_id].tokens = [(t + 1) % oracle.vocab if w else t for t, w in zip(want, wrong)]

        self.cls._draft = drafted
        return self

    def __exit__(self, *exc):
        self.cls._draft = self.original


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", default=DEEPSEEK + QWEN)
    ap.add_argument("--seeds", type=int, nargs="+", default=[17])
    ap.add_argument("--targets", nargs="+", default=["rocm", "neuron"])
    ap.add_argument("--k", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--out", default="bench/results/cpu-mtp-sweep.json")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    rows, failures = [], 0
    t0 = time.perf_counter()
    for case_index, name in enumerate(args.cases):
        for seed in args.seeds:
            with tempfile.TemporaryDirectory() as tmp:
                hf = build(Path(tmp), name, seed)
                vocab = hf.config.vocab_size
                gen = torch.Generator().manual_seed(seed * 1000 + case_index)  # prompts differ per case
                prompts = [torch.randint(3, vocab, (int(n),), generator=gen).tolist()
                           for n in torch.randint(2, 24, (4,), generator=gen)]
                params = SamplingParams(max_new_tokens=args.new_tokens, ignore_eos=True)
                for target in args.targets:
                    make = lambda k: LLM(tmp, target=target, dtype="float32", max_model_len=128,  # noqa: E731
                                         max_num_seqs=len(prompts), speculative_tokens=k)
                    ref = make(None).generate(prompts, params)
                    refs = {tuple(p): r for p, r in zip(prompts, ref)}
                    for k in args.k:
                        for drafts in ("head", "oracle"):
                            llm = make(k)
                            if drafts == "oracle":
                                with OracleDrafts(refs, vocab, seed * 1000 + case_index * 10 + k):
                                    got = llm.generate(prompts, params)
                            else:
                                got = llm.generate(prompts, params)
                            stats = llm.stats.as_dict()
                            spec = stats.get("speculative") or {}
                            row = {"case": name, "seed": seed, "target": target, "k": k, "drafts": drafts,
                                   "prompt_lengths": [len(p) for p in prompts], "greedy_equal": got == ref,
                                   "acceptance_rate": stats.get("acceptance_rate"),
                                   "mean_accepted_tokens": stats.get("mean_accepted_tokens"),
                                   "rollbacks": spec.get("rollbacks")}
                            failures += not row["greedy_equal"]
                            rows.append(row)
                            print(f"{name:24s} seed {seed} {target:6s} K={k} {drafts:6s}: equal {row['greedy_equal']}, "
                                  f"acceptance {row['acceptance_rate']:.3f}, rollbacks {row['rollbacks']}", flush=True)
    result = {"dtype": "float32", "device": "cpu", "new_tokens": args.new_tokens, "cases": len(rows),
              "all_equal": failures == 0, "seconds": time.perf_counter() - t0, "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"{len(rows)} cases, {failures} unequal, {result['seconds']:.0f} s -> {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
