"""MTP speculative decoding benchmark: tokens/s with and without speculation, and the acceptance rate, for a
DeepSeek-V3-shaped and a Qwen3-Next-shaped model whose MTP head is trained on the model's own greedy outputs.

For each model:
  1. transformers builds a random model of the shape (its own initialisation) and writes it with ``save_pretrained``;
     the MTP block (one decoder layer of the model's MTP kind: MoE for DeepSeek, full-attention MoE for Qwen3-Next)
     is built beside it with the library's layer class and initialisation;
  2. training data is what the measured runs emit. The training prompt sets that are timed later (one per batch
     size, disjoint) are decoded by every timed row's own configuration (:func:`path_data`: the same engine,
     ``--dtype``, CUDA graphs, batch composition, max_model_len and warm-up as the timed call, speculative rows with
     the untrained head -- on attention targets a greedy trajectory does not depend on which drafts are accepted);
     the rest of ``--train-seqs`` random prompts are filler continuations. In bf16 a random model's greedy text is
     full of near-ties, so a continuation produced at another batch size or by another kernel path leaves the
     measured one after a few tokens (the first H200 run trained on batch-64 continuations: acceptance 0.09 at
     batch 1). The head is fed the engine's own bf16 hidden states (one prefill per sequence), as it is when it
     drafts;
  3. the MTP head (input norms, projection, block, output norm) is trained for ``--train-steps`` Adam steps on those
     sequences with transformers' modules (token t[i+1] and the target's final hidden state h[i] -> t[i+2], the
     DeepSeek-V3 MTP objective), then written into the checkpoint as released checkpoints lay it out
     (``model.layers.{num_hidden_layers}.*`` / ``mtp.*``) with ``num_nextn_predict_layers`` / ``mtp_num_hidden_layers``;
  4. modelgen decodes the training and held-out prompts at each batch size without speculation (CUDA graphs on, and
     eager: ``--plain-eager``) and with K = 1..3 draft tokens, on a GPU both with the verify / draft steps replaying
     CUDA graphs (``kK``) and eager (``kK_eager``, ``--eager-k``; ``spec_graph_replays`` counts the replays):
     tokens/s = generated tokens / wall time of the generate call (prefill included, the same for every row), the
     acceptance rate, mean accepted drafts per verify step, ``on_data_prefix`` (training prompts: generated tokens
     shared with the trajectory the row's configuration traced for the data -- all of them unless the engine is
     nondeterministic or, for Gated DeltaNet targets, a rollback's re-advance rounds differently), whether the greedy
     tokens equal the plain row's and how many leading tokens they share, and where they part (``divergence``): the
     target's top-2 logit margin there (bf16 verify windows and one-token decode steps round differently, so a near-
     tie may flip; an early parting with a wide margin would be a bug);
  5. diagnostics (``--checks N``): teacher-forced top-1 agreement of the target over one prefill, over verify
     windows and over one-token decode steps, the logit difference and argmax flips between windows and decode steps
     with the margins at the flips, and the top-1 agreement of modelgen's MTP head and of the trained transformers
     head; on a GPU one speculative row with the torch reference ops instead of the Triton kernels (``--controls 1``).

What the rows mean (also written into the JSON as ``rows``): ``batchN_train_prompts`` decodes N training prompts
along the exact trajectory the head was trained on, so its acceptance is that of a head that has learned what this
model emits -- a ceiling, reachable on a random model only by memorising; ``batchN`` decodes N held-out prompts,
whose continuations a random model makes unpredictable (no structure to learn from a few hundred sequences), so
acceptance ~0 is expected there and those rows show the cost of speculation's extra steps. A real checkpoint's text
lies between the two.

Writes ``--out`` (JSON, rewritten after every set of rows). CPU smoke test (tiny shapes, a few steps):

  python bench/mtp.py --size tiny --device cpu --train-steps 20 --new-tokens 16 --out /tmp/mtp-tiny.json
  bash bench/mtp_gpu.sh acceptance    # on the H200: the DeepSeek-V3 shape, < 240 s (bench/mtp_gpu.sh)
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from modelgen.runtime.engine.llm import LLM  # noqa: E402
from modelgen.runtime.engine.sampler import SamplingParams  # noqa: E402

# Shapes: "h200" keeps the real models' per-layer structure (MLA dims, experts, GDN heads) at a width and depth one
# GPU trains and serves in minutes; "tiny" is the CPU smoke test.
SHAPES = {
    "deepseek": {
        "h200": dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, moe_intermediate_size=1408,
                     num_hidden_layers=6, num_attention_heads=16, num_key_value_heads=16, q_lora_rank=768,
                     kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                     n_routed_experts=64, num_experts_per_tok=6, n_shared_experts=2, n_group=8, topk_group=3,
                     first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True,
                     max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False, rope_interleave=True),
        "tiny": dict(vocab_size=160, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=48,
                     kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, n_routed_experts=8,
                     num_experts_per_tok=2, n_shared_experts=1, n_group=2, topk_group=1, first_k_dense_replace=1,
                     routed_scaling_factor=2.5, norm_topk_prob=True, max_position_embeddings=512, rms_norm_eps=1e-6,
                     tie_word_embeddings=False, rope_interleave=True),
    },
    "qwen3_next": {
        "h200": dict(vocab_size=32000, hidden_size=2048, intermediate_size=5120, num_hidden_layers=8,
                     num_attention_heads=16, num_key_value_heads=2, head_dim=256, max_position_embeddings=4096,
                     rms_norm_eps=1e-6, linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
                     linear_num_key_heads=16, linear_num_value_heads=32, num_experts=64, num_experts_per_tok=10,
                     moe_intermediate_size=512, shared_expert_intermediate_size=512, norm_topk_prob=True,
                     decoder_sparse_step=1, tie_word_embeddings=False,
                     layer_types=["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3
                     + ["full_attention"]),
        "tiny": dict(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, max_position_embeddings=512, rms_norm_eps=1e-6,
                     linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
                     linear_num_key_heads=2, linear_num_value_heads=4, num_experts=8, num_experts_per_tok=2,
                     moe_intermediate_size=32, shared_expert_intermediate_size=48, norm_topk_prob=True,
                     decoder_sparse_step=1, tie_word_embeddings=False,
                     layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"]),
    },
}
HF_CLASSES = {"deepseek": ("DeepseekV3Config", "DeepseekV3ForCausalLM"),
              "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM")}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ model + MTP head
class MtpHead(torch.nn.Module):
    """The MTP formula both layouts share (transformers' MtpLayer): post_norm(block(proj([enorm(e); hnorm(h)])))."""

    def __init__(self, hf, block: torch.nn.Module):
        super().__init__()
        cfg = hf.config
        norm = type(hf.model.norm)
        self.enorm, self.hnorm, self.post_norm = (norm(cfg.hidden_size, eps=cfg.rms_norm_eps) for _ in range(3))
        self.proj = torch.nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.block = block
        self._hf = (hf,)  # frozen target: embedding, rotary, LM head

    def forward(self, ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """``ids [B, T]``, the target's final hidden states ``hidden [B, T, H]`` -> logits for t[i+2], ``[B, T-1, V]``."""
        from transformers.masking_utils import create_causal_mask

        hf = self._hf[0]
        x = self.proj(torch.cat([self.enorm(hf.model.embed_tokens(ids[:, 1:])), self.hnorm(hidden[:, :-1])], -1))
        pos = torch.arange(x.shape[1], device=x.device)[None].expand(x.shape[0], -1)
        mask = create_causal_mask(config=hf.config, inputs_embeds=x, attention_mask=None, past_key_values=None,
                                  position_ids=pos)
        y = self.block(x, attention_mask=mask, position_ids=pos, position_embeddings=hf.model.rotary_emb(x, pos))
        y = y[0] if isinstance(y, tuple) else y
        return hf.lm_head(self.post_norm(y))

    def checkpoint_tensors(self, kind: str, num_layers: int) -> dict[str, torch.Tensor]:
        """The head as released checkpoints store it (DeepSeek: model.layers.{L}.*; Qwen3-Next: mtp.*)."""
        block = {k: v.detach() for k, v in self.block.state_dict().items()}
        if kind == "deepseek":
            p = f"model.layers.{num_layers}."
            out = {p + k: v for k, v in block.items()}
            names = {"enorm": self.enorm, "hnorm": self.hnorm, "shared_head.norm": self.post_norm, "eh_proj": self.proj}
        else:
            p = "mtp."
            out = {p + "layers.0." + k: v for k, v in block.items()}
            names = {"pre_fc_norm_embedding": self.enorm, "pre_fc_norm_hidden": self.hnorm, "norm": self.post_norm,
                     "fc": self.proj}
        out.update({f"{p}{n}.weight": m.weight.detach() for n, m in names.items()})
        return out


def build(kind: str, size: str, path: Path, device: str, seed: int = 0, layers: int | None = None, edit=None):
    """Random HF model of the shape saved to ``path``, and an untrained :class:`MtpHead` for it (fp32, on device).
    ``edit(hf)``: changes the weights before they are saved (bench/spec_oracle.py)."""
    import transformers

    cfg_cls, model_cls = (getattr(transformers, n) for n in HF_CLASSES[kind])
    shape = dict(SHAPES[kind][size])
    if layers:  # --layers: deeper targets, where one draft layer costs a smaller share of a step
        shape["num_hidden_layers"] = layers
        if "layer_types" in shape:  # Qwen3-Next: its 3:1 linear:full schedule repeated
            shape["layer_types"] = [shape["layer_types"][i % len(shape["layer_types"])] for i in range(layers)]
    config = cfg_cls(**shape, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(seed)
    with torch.device(device):  # initialised where it trains (billions of parameters initialise slowly on a CPU)
        hf = model_cls(config).eval()
    if edit is not None:
        edit(hf)
    hf.save_pretrained(path)
    # The MTP block: a decoder layer at index num_hidden_layers of a config that makes it the MTP kind (transformers'
    # get_mtp_config: MoE; full attention), initialised by the library.
    mtp_cfg = copy.deepcopy(config)
    n = config.num_hidden_layers
    if kind == "deepseek":
        mtp_cfg.first_k_dense_replace = 0
    else:
        mtp_cfg.layer_types = list(config.layer_types) + ["full_attention"]
    with torch.device(device):
        block = type(hf.model.layers[0])(mtp_cfg, n)
        block.apply(hf._init_weights)
        head = MtpHead(hf, block)
    head.apply(lambda m: hf._init_weights(m) if m is not block else None)
    for p in hf.parameters():
        p.requires_grad_(False)
    return hf.to(device), head.to(device)


def write_head(path: Path, kind: str, head: MtpHead, num_layers: int) -> None:
    from safetensors.torch import load_file, save_file

    extra = {k: v.to("cpu", torch.bfloat16).contiguous() for k, v in head.checkpoint_tensors(kind, num_layers).items()}
    weight_map = {}
    for f in sorted(path.glob("*.safetensors")):
        if f.name != "mtp.safetensors":
            weight_map.update({k: f.name for k in load_file(f)})
    save_file(extra, str(path / "mtp.safetensors"), metadata={"format": "pt"})
    weight_map.update({k: "mtp.safetensors" for k in extra})
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    cfg = json.loads((path / "config.json").read_text())
    cfg["num_nextn_predict_layers" if kind == "deepseek" else "mtp_num_hidden_layers"] = 1
    (path / "config.json").write_text(json.dumps(cfg, indent=2))


# ------------------------------------------------------------------------------------------------------ the phases
def free_memory() -> None:
    """After an engine is dropped: free its GPU memory before the next one is built (a run builds ~25 engines; each
    sizes its KV cache from the memory it finds free, so a dropped one's cache, weights or graph pool must not linger
    in a reference cycle)."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def prefill_hidden(llm, sid: int, tokens: list[int]) -> torch.Tensor:
    """The target's final hidden states ``[len(tokens), H]`` from one engine prefill (the sequence's KV blocks and
    recurrent state stay held under ``sid`` until the caller releases them)."""
    from modelgen.runtime.work import Work

    llm.blocks.ensure(sid, len(tokens))
    if llm.state_pool is not None:
        llm.state_pool.allocate(sid)
    return llm.runner.step([Work(sid, tokens, 0)], return_hidden=True)[1]


def greedy_data(path: Path, args, prompts: list[list[int]], extra: list[list[int]]) -> tuple[list[list[int]], torch.Tensor]:
    """Filler training data and the hidden states the head trains on. ``prompts``' greedy continuations
    (``--train-len`` tokens, one batch of up to 64, graphs) by modelgen in ``--dtype``; then the target's final
    hidden states of every training sequence (those and ``extra``, the measured paths' sequences) from one engine
    prefill each, in ``--dtype``: the draft is fed the engine's bf16 hidden states when it runs, not transformers'
    fp32 ones, so it learns on what it will see. Returns (prompt + continuation of each prompt, hidden
    ``[len(extra) + len(prompts), T, H]`` float32, extra first)."""
    llm = LLM(path, dtype=args.dtype, device=args.device, max_num_seqs=min(max(len(prompts), 1), 64),
              max_model_len=model_len(args))
    outs = llm.generate(prompts, SamplingParams(max_new_tokens=args.train_len, ignore_eos=True)) if prompts else []
    seqs = [p + o for p, o in zip(prompts, outs)]
    states = []
    for n, seq in enumerate(extra + seqs):
        try:
            states.append(prefill_hidden(llm, 10**6 + n, seq).float())
        finally:
            llm._release_all([10**6 + n])
    del llm
    free_memory()
    return seqs, torch.stack(states)


def path_data(path: Path, args, sets: dict[int, list[list[int]]]) -> dict[int, dict[str, list[list[int]]]]:
    """The measured rows' own trajectories: for each training prompt set (one per batch size) and each row of
    :func:`row_configs`, the ``--train-len`` greedy tokens that row's configuration emits -- the same engine, dtype,
    graphs, batch composition, max_model_len and warm-up as the timed call (:func:`decode` itself), with the MTP
    head still untrained. A greedy trajectory does not depend on which drafts are accepted: every verify step feeds
    K + 1 tokens per sequence whatever the draft proposed (graphed: fixed slots), and the kernels compute each row
    on its own, so the trained head's run retraces it (``on_data_prefix`` of each row checks this on the device)."""
    out = {}
    for batch, prompts in sets.items():
        out[batch] = {}
        for name, cfg in row_configs(args).items():
            out[batch][name] = decode(path, args, prompts, new_tokens=args.train_len, **cfg)["tokens"]
            log(f"  batch {batch} {name}: {len(prompts)} x {args.train_len} tokens")
    return out


def train(head: MtpHead, seqs: list[list[int]], states: torch.Tensor, args) -> list[float]:
    """AdamW on the MTP objective: position i of (token t[i+1], target hidden h[i]) predicts t[i+2], continuation
    targets only (the prompt is random noise); ``states``: the engine's hidden states of ``seqs``."""
    data = torch.tensor(seqs, device=args.device)
    states = states.to(args.device)
    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(0)
    losses = []
    for step in range(args.train_steps):
        idx = torch.randint(0, data.shape[0], (args.train_batch,), generator=gen).to(data.device)
        ids, hidden = data[idx], states[idx]
        with torch.autocast(device_type=ids.device.type, dtype=torch.bfloat16, enabled=ids.device.type == "cuda"):
            logits = head(ids, hidden)[:, :-1]  # position i predicts t[i+2]: the last position has no target
        target = ids[:, 2:]
        keep = torch.arange(2, ids.shape[1], device=ids.device) >= args.prompt_len
        loss = torch.nn.functional.cross_entropy(logits[:, keep].float().flatten(0, 1), target[:, keep].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss))
        if step % max(1, args.train_steps // 10) == 0 or step == args.train_steps - 1:
            log(f"  step {step}: loss {losses[-1]:.3f}")
    return losses


def model_len(args) -> int:
    """One max_model_len for every engine of a run: the block-table width of the decode / verify graphs (and the
    attention kernels' split over it) follows it, so data generation and timed rows must share it."""
    return args.prompt_len + max(args.train_len, args.new_tokens) + 8


def row_configs(args) -> dict[str, dict]:
    """The rows :func:`decode_rows` times, in order, as :func:`decode` arguments: plain decoding (CUDA graphs; eager
    too with ``--plain-eager``), and K = 1..3 draft tokens with the verify / draft steps replaying CUDA graphs
    (``kK``) and eager (``kK_eager``, ``--eager-k``); the eager variants on a GPU only."""
    gpu = args.device.startswith("cuda")
    rows = {"plain": dict(k=None, cuda_graphs=True)}
    if gpu and args.plain_eager:
        rows["plain_eager"] = dict(k=None, cuda_graphs=False)
    for k in args.k:
        rows[f"k{k}"] = dict(k=k, cuda_graphs=True)
        if gpu and k in args.eager_k:
            rows[f"k{k}_eager"] = dict(k=k, cuda_graphs=True, spec_graphs=False)
    return rows


def decode(path: Path, args, prompts: list[list[int]], k: int | None, cuda_graphs: bool,
           spec_graphs: bool = True, new_tokens: int | None = None,
           reference: list[list[int]] | None = None) -> dict:
    """One timed generate call (``new_tokens``, default ``--new-tokens``, greedy, EOS ignored) after a 4-token
    warm-up. ``spec_graphs=False``: speculative steps eager (``MODELGEN_SPEC_GRAPHS=0``) while draft-free decode
    steps keep the runner's graphs -- the speculative rows before the verify/draft graphs. ``reference``: the plain
    row's tokens; where this row's tokens part from them, :func:`divergence` records the target's top-2 margin."""
    import os

    old = os.environ.get("MODELGEN_SPEC_GRAPHS")
    os.environ["MODELGEN_SPEC_GRAPHS"] = "1" if spec_graphs else "0"
    try:
        llm = LLM(path, dtype=args.dtype, device=args.device, max_num_seqs=len(prompts), cuda_graphs=cuda_graphs,
                  max_model_len=model_len(args), speculative_tokens=k)
    finally:
        if old is None:
            os.environ.pop("MODELGEN_SPEC_GRAPHS", None)
        else:
            os.environ["MODELGEN_SPEC_GRAPHS"] = old
    params = SamplingParams(max_new_tokens=new_tokens or args.new_tokens, ignore_eos=True)
    llm.warmup()  # every decode / verify / draft graph bucket, as a server does before it takes requests
    llm.generate(prompts, SamplingParams(max_new_tokens=4, ignore_eos=True))  # warm-up (kernels, caches)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    stats = llm.stats.as_dict()
    # replays of the verify / draft / chained-draft graphs over both calls (None: that step ran eagerly)
    replays = llm.speculative.graph_replays() if llm.speculative is not None else None
    parted = divergence(llm, prompts, reference, outs) if reference is not None and outs != reference else None
    del llm
    free_memory()
    return {"tokens": outs, "seconds": dt, "tokens_per_s": sum(map(len, outs)) / dt,
            "acceptance_rate": stats.get("acceptance_rate"), "mean_accepted_tokens": stats.get("mean_accepted_tokens"),
            "speculative": stats.get("speculative"), "spec_graph_replays": replays, "divergence": parted}


def divergence(llm, prompts: list[list[int]], reference: list[list[int]], outs: list[list[int]]) -> list[dict]:
    """For each prompt whose tokens part from the reference (plain) row's: where (``position``, generated tokens
    shared), the two tokens, and the target's logits at that context from one prefill of it (``LLM.score``: a third
    numeric path, so it shows how close the tie is, not which side each path fell on): the top-2 ``margin``, the
    ``plain - row`` logit gap, the spacing of the dtype at the top-1 logit (``ulp``) and the spread of the logits
    (``logit_std``): a margin of a few ulps, a small fraction of the spread, is a rounding tie; a wide one a bug."""
    found = []
    for i, (p, ref, out) in enumerate(zip(prompts, reference, outs)):
        d = prefix_len(ref, out)
        if d == min(len(ref), len(out)):
            continue
        logits = llm.score(p + ref[:d])[-1].float()
        top = torch.topk(logits, 2)
        v1 = float(top.values[0])
        ulp = torch.finfo(llm.dtype).eps * 2.0 ** (math.frexp(v1 or 1.0)[1] - 1)  # spacing in [2^e, 2^(e+1))
        found.append({"prompt": i, "position": d, "plain_token": ref[d], "row_token": out[d],
                      "top1_token": int(top.indices[0]), "top2_token": int(top.indices[1]),
                      "top1_logit": v1, "margin": v1 - float(top.values[1]),
                      "plain_minus_row_logit": float(logits[ref[d]] - logits[out[d]]), "ulp": ulp,
                      "logit_std": float(logits.std())})
    return found


def teacher_forced(path: Path, args, hf, head: MtpHead, seqs: list[list[int]], k: int) -> dict:
    """Where a speculative run can go wrong, measured on the training sequences (greedy continuations, so the target's
    argmax at position i is t[i+1] wherever its numerics agree with the engine that generated them):

    * ``target_prefill_top1``: the target's argmax over one prefill of the whole sequence (``return_hidden``, the
      hidden states speculation reads) equals t[i+1];
    * ``target_window_top1``: the same, fed as speculation's verify steps feed it -- the prompt, then windows of
      ``k + 1`` tokens that each continue the cached sequence (prefill-with-context);
    * ``target_decode_top1``: the same, one token per step as plain decoding feeds it;
    * ``window_vs_decode``: the two paths' logits at the same positions -- ``max_abs_diff`` / ``mean_abs_diff``
      (0 in float32 up to summation order), ``argmax_flips`` (positions whose argmax differs: a greedy speculative
      run parts from the plain one at the first flip it reaches) and the decode path's top-2 margin at each flip
      (``flip_margins``), beside the median top-2 margin over all positions (``median_margin``);
    * ``draft_top1``: modelgen's MTP head (token t[i+1], the target's h[i]) predicts t[i+2];
    * ``reference_head_top1``: the trained transformers head on the same inputs, with transformers' float32 hidden
      states (the head was trained on the engine's ones).

    On a GPU the windows and the one-token steps replay the CUDA graphs a timed batch-1 row replays (the verify
    ``StepGraphs`` through the decoder's own ``_target_step``; the runner's decode graphs), so ``window_vs_decode``
    is the rounding gap between a batch-1 speculative run and plain decoding; on the CPU both run eagerly.

    A run with zero acceptance shows here which of the target's verify path, the draft's loading or its forward
    disagrees (continuation positions only: the prompts are random)."""
    from modelgen.runtime.work import Work

    llm = LLM(path, dtype=args.dtype, device=args.device, max_num_seqs=4, cuda_graphs=True, speculative_tokens=k,
              max_model_len=max(map(len, seqs)) + 8)
    spec = llm.speculative
    hits = {"target_prefill_top1": [], "target_window_top1": [], "target_decode_top1": [], "draft_top1": [],
            "reference_head_top1": []}
    diffs, flips, flip_margins, margins = [], 0, [], []
    P = args.prompt_len
    for n, seq in enumerate(seqs):
        sid = 10**6 + n
        try:
            hidden = prefill_hidden(llm, sid, seq)
            top = spec.draft.compute_logits(hidden).argmax(-1).cpu()
            want = torch.tensor(seq[1:])
            hits["target_prefill_top1"].append((top[P - 1 : -1] == want[P - 1 :]).float().mean().item())
            # positions P .. len-2 (each predicts the next token of the sequence) by verify windows, then one by one
            paths = {}
            for name, width in (("window", k + 1), ("decode", 1)):
                rows, at = [], P
                llm.runner.step([Work(sid, seq[:P], 0)], return_hidden=True)  # a fresh prefill resets GDN state too
                while at < len(seq):
                    w = seq[at : at + width]
                    if len(w) > 1:  # a verify window: the speculative step's own target call (graphed on a GPU)
                        h = spec._target_step([Work(sid, w, at)])
                    else:  # one token: a plain decode step (the runner's decode graph on a GPU)
                        _, h = llm.runner.step([Work(sid, w, at)], return_hidden=True)
                    rows.append(spec.draft.compute_logits(h).float())
                    at += len(w)
                paths[name] = torch.cat(rows)[:-1]
                hits[f"target_{name}_top1"].append((paths[name].argmax(-1).cpu() == want[P:]).float().mean().item())
            win, dec = paths["window"], paths["decode"]
            diffs.append((win - dec).abs())
            top2 = torch.topk(dec, 2).values
            margin = (top2[:, 0] - top2[:, 1]).cpu()
            flipped = (win.argmax(-1) != dec.argmax(-1)).cpu()
            flips += int(flipped.sum())
            flip_margins += margin[flipped].tolist()
            margins.append(margin)
            spec.draft.bind_hidden_states(hidden[:-1])
            draft = spec.runner.step([Work(sid, seq[1:], 0)], all_positions=True).argmax(-1).cpu()
            hits["draft_top1"].append((draft[P - 2 : -1] == torch.tensor(seq[P:])).float().mean().item())
        finally:
            llm._release_all([sid])
        ids = torch.tensor([seq], device=args.device)
        with torch.no_grad(), torch.autocast(device_type=ids.device.type, dtype=torch.bfloat16,
                                             enabled=ids.device.type == "cuda"):
            ref = head(ids, hf.model(ids).last_hidden_state)[0].argmax(-1).cpu()
        hits["reference_head_top1"].append((ref[P - 2 : -1] == torch.tensor(seq[P:])).float().mean().item())
    del llm
    free_memory()
    out = {name: sum(v) / len(v) for name, v in hits.items()}
    d = torch.cat(diffs)
    out["window_vs_decode"] = {"positions": d.shape[0], "max_abs_diff": float(d.max()),
                               "mean_abs_diff": float(d.mean()), "argmax_flips": flips,
                               "flip_margins": flip_margins, "median_margin": float(torch.cat(margins).median())}
    return out


def prefix_len(a: list[int], b: list[int]) -> int:
    """Tokens two greedy outputs share before they first differ."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def control(path: Path, args, prompts: list[list[int]], k: int, backend: str) -> dict:
    """One speculative row with ``MODELGEN_BACKEND=backend`` (``torch``: the reference ops, no Triton kernel): a
    bug in a GPU kernel shows as acceptance here but not in the Triton row."""
    import os

    from modelgen.runtime.ops import gpu

    old = os.environ.get("MODELGEN_BACKEND")
    os.environ["MODELGEN_BACKEND"] = backend
    gpu.refresh()
    try:
        return decode(path, args, prompts, k, cuda_graphs=False)
    finally:
        if old is None:
            os.environ.pop("MODELGEN_BACKEND", None)
        else:
            os.environ["MODELGEN_BACKEND"] = old
        gpu.refresh()


def fixed_kernels(path: Path, args, prompts: list[list[int]], k: int) -> dict:
    """Batch 1 with one kernel per op whatever the row count: ``MODELGEN_GEMV=triton`` (every bf16 linear of up to 16
    rows runs linear.py's skinny kernel with its 16-row tile and one autotuned config, instead of the split-K GEMV
    timing may pick at one row) and ``MODELGEN_MOE=pairs`` (the MoE's per-pair path at any small token count). If
    the plain and the K-draft rows then agree (``greedy_equal``), the per-row-count kernel choice alone parted the
    default batch-1 rows; if not, another op rounds by row count. Rows ``plain_fixed_kernels`` and
    ``kK_fixed_kernels`` (their trajectories are not the trained ones: acceptance is not the point here). The
    per-shape choices of linear.py / moe.py are cached per process, so they are set aside and restored."""
    import os

    from modelgen.runtime.ops.gpu import linear as glinear
    from modelgen.runtime.layers.moe import kernels as gmoe

    saved = {m: dict(m._CHOICE) for m in (glinear, gmoe)}
    env = {"MODELGEN_GEMV": "triton", "MODELGEN_MOE": "pairs"}
    old = {n: os.environ.get(n) for n in env}
    try:
        for m in saved:
            m._CHOICE.clear()
        os.environ.update(env)
        base = decode(path, args, prompts, None, cuda_graphs=True)
        spec = decode(path, args, prompts, k, cuda_graphs=True, reference=base["tokens"])
    finally:
        for n, v in old.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v
        for m, choice in saved.items():
            m._CHOICE.clear()
            m._CHOICE.update(choice)
    spec["greedy_equal"] = spec["tokens"] == base["tokens"]
    spec["mean_shared_prefix"] = sum(map(prefix_len, spec["tokens"], base["tokens"])) / len(prompts)
    spec["speedup_vs_plain"] = spec["tokens_per_s"] / base["tokens_per_s"]
    log(f"  batch 1 fixed kernels: plain {base['tokens_per_s']:.1f} tok/s, k{k} {spec['tokens_per_s']:.1f} tok/s, "
        f"greedy equal {spec['greedy_equal']}, shared prefix {spec['mean_shared_prefix']:.1f}")
    return {"plain_fixed_kernels": base, f"k{k}_fixed_kernels": spec}


def decode_rows(path: Path, args, prompts: list[list[int]], what: str,
                data: dict[str, list[list[int]]] | None = None) -> dict:
    """The :func:`row_configs` rows for one prompt set. ``data``: each row's own trajectory from
    :func:`path_data` (the training prompt sets), for ``on_data_prefix``."""
    rows, skipped = {}, []
    configs = row_configs(args)
    base = decode(path, args, prompts, **configs.pop("plain"))
    rows["plain"] = base
    for name, cfg in configs.items():
        if time.monotonic() > args.deadline:  # --budget-s: rows that would start after it are listed, not run
            skipped.append(name)
            continue
        rows[name] = decode(path, args, prompts, reference=base["tokens"], **cfg)
    if args.device.startswith("cuda") and args.controls:
        rows[f"k{args.k[0]}_torch_ops"] = control(path, args, prompts, args.k[0], "torch")
    if args.device.startswith("cuda") and args.fixed_kernel_rows and len(prompts) == 1 and data is not None:
        if time.monotonic() > args.deadline:
            skipped.append("fixed_kernels")
        else:
            rows.update(fixed_kernels(path, args, prompts, args.k[0]))
    for name, r in rows.items():
        if data is not None and name in data:
            # generated tokens this timed row shares with the trajectory its configuration traced for the training
            # data (all of them: the head was trained on exactly what this row emits)
            r["on_data_prefix"] = sum(map(prefix_len, r["tokens"], data[name])) / len(prompts)
        if name == "plain":
            continue
        if name.endswith("_fixed_kernels"):
            continue  # compared with plain_fixed_kernels in fixed_kernels()
        # bf16: a verify window, an eager step and a graph decode step round differently, so outputs may part after
        # a near-tie; the shared prefix says how soon, ``divergence`` how close the tie was (a bug parts them at once)
        r["greedy_equal"] = r["tokens"] == base["tokens"]
        r["mean_shared_prefix"] = sum(map(prefix_len, r["tokens"], base["tokens"])) / len(prompts)
        if r.get("speculative") is None:
            continue
        r["speedup_vs_plain"] = r["tokens_per_s"] / base["tokens_per_s"]
        eager = rows.get(f"{name}_eager")
        if eager is not None:
            r["speedup_vs_eager_speculative"] = r["tokens_per_s"] / eager["tokens_per_s"]
        margins = [f"{d['margin']:.4f}" for d in r.get("divergence") or []]
        log(f"{what} {name}: {r['tokens_per_s']:.1f} tok/s (plain {base['tokens_per_s']:.1f}), acceptance "
            f"{r['acceptance_rate']:.3f}, mean accepted {r['mean_accepted_tokens']:.2f}, greedy equal "
            f"{r['greedy_equal']}, shared prefix {r['mean_shared_prefix']:.1f}, on data "
            f"{r.get('on_data_prefix')}, top-2 margins where it parts {margins}, graph replays "
            f"{r['spec_graph_replays']}")
    for r in rows.values():
        r.pop("tokens")
    if skipped:
        rows["skipped_by_budget"] = skipped
        log(f"{what}: budget reached, skipped {skipped}")
    return rows


ROWS_MEANING = {
    "batchN_train_prompts": (
        "N training prompts (disjoint per batch size), decoded with the exact configuration that traced the head's "
        "training data for them: the timed row emits the trajectory the head was trained on (on_data_prefix = "
        "generated tokens shared with it; equal to new_tokens when the engine is deterministic). Acceptance here is "
        "that of a head that has learned what this model emits on this path -- a ceiling: a random model's text is "
        "unpredictable, so only memorisation can reach it"),
    "batchN": (
        "N held-out prompts: the head never saw their continuations; a random model's greedy continuation of a new "
        "random prompt is not predictable from a few hundred sequences, so acceptance ~0 (about 1/vocab) is "
        "expected and only the step costs of speculation show"),
    "plain": "no speculation, CUDA graphs on a GPU (plain_eager: without)",
    "kK / kK_eager": "K draft tokens; verify and draft steps replaying CUDA graphs / eager",
    "greedy_equal / mean_shared_prefix": (
        "tokens equal to the plain row's / generated tokens shared before they part; fp32 is exact "
        "(tests/test_speculative*.py), bf16 rounds the K+1-token verify forward and the one-token decode step "
        "differently so a near-tie may flip"),
    "plain_fixed_kernels / kK_fixed_kernels": (
        "batch 1 with MODELGEN_GEMV=triton MODELGEN_MOE=pairs: one kernel per op at 1 and K+1 rows; greedy_equal "
        "compares the two (does the per-row-count kernel choice alone part the default rows?)"),
    "divergence": (
        "where a row parts from the plain row: position, both tokens, and the target's top-2 logit margin there "
        "from one bf16 prefill (ulp: the dtype's spacing at the top-1 logit)"),
}


def run_model(kind: str, args, results: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        log(f"{kind}: building the {args.size} model")
        hf, head = build(kind, args.size, path, args.device, layers=args.layers)
        if args.profile:
            write_head(path, kind, head, hf.config.num_hidden_layers)
            del hf, head
            results["models"][kind] = {"profile": profile_steps(path, args, vocab=SHAPES[kind][args.size]["vocab_size"])}
            Path(args.out).write_text(json.dumps(results, indent=2))
            return
        vocab = hf.config.vocab_size
        gen = torch.Generator().manual_seed(1)
        prompts = [torch.randint(3, vocab, (args.prompt_len,), generator=gen).tolist() for _ in range(args.train_seqs)]
        # The measured training prompt sets, one per batch size and disjoint: a prompt decoded at batch 1 and in a
        # batch of 8 follows two bf16 trajectories, and each set's head data must be its own.
        sets, at = {}, 0
        for batch in args.batches:
            sets[batch], at = prompts[at : at + batch], at + batch
        if at > len(prompts):
            raise SystemExit(f"--train-seqs {args.train_seqs}: fewer than the {at} measured training prompts")
        log(f"{kind}: the measured rows' own trajectories ({args.train_len} tokens; head untrained)")
        write_head(path, kind, head, hf.config.num_hidden_layers)  # speculative rows need a head to trace their path
        t0 = time.perf_counter()
        paths = path_data(path, args, sets)
        path_s = time.perf_counter() - t0
        measured = [p + o for batch, rows in paths.items() for toks in rows.values() for p, o in zip(sets[batch], toks)]
        log(f"{kind}: filler training data ({len(prompts) - at} x {args.train_len} tokens) and engine hidden states")
        t0 = time.perf_counter()
        filler, states = greedy_data(path, args, prompts[at:], measured)
        seqs = measured + filler
        data_s = time.perf_counter() - t0
        log(f"{kind}: training the MTP head for {args.train_steps} steps on {len(seqs)} sequences")
        t0 = time.perf_counter()
        losses = train(head, seqs, states, args)
        del states
        train_s = time.perf_counter() - t0
        write_head(path, kind, head, hf.config.num_hidden_layers)
        checks = None
        if args.checks:
            log(f"{kind}: teacher-forced checks of the target's verify path and the draft head")
            # training sequences, then held-out ones (greedy continuations of new prompts): a head that memorised its
            # training continuations instead of learning to predict the model agrees on the first only
            gen3 = torch.Generator().manual_seed(3)
            new = [torch.randint(3, vocab, (args.prompt_len,), generator=gen3).tolist() for _ in range(args.checks)]
            held = greedy_data(path, args, new, [])[0]
            checks = {"train": teacher_forced(path, args, hf, head, seqs[: args.checks], max(args.k)),
                      "held_out": teacher_forced(path, args, hf, head, held, max(args.k))}
            log(f"  {checks}")
        del hf, head
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
        entry = {"shape": SHAPES[kind][args.size],
                 "train": {"steps": args.train_steps, "sequences": len(seqs), "measured_path_sequences": len(measured),
                           "filler_sequences": len(filler), "path_data_seconds": path_s, "data_seconds": data_s,
                           "train_seconds": train_s, "loss_first": losses[0] if losses else None,
                           "loss_last": losses[-1] if losses else None},
                 "teacher_forced": checks, "decode": {}}
        gen = torch.Generator().manual_seed(2)  # held-out prompts
        for batch in args.batches:
            held = [torch.randint(3, vocab, (args.prompt_len,), generator=gen).tolist() for _ in range(batch)]
            # training prompts first: under --budget-s they are the rows that show the speed-up
            for label, prompts_, data in (("train", sets[batch], paths[batch]), ("held_out", held, None)):
                if label == "train" and args.new_tokens > args.train_len:
                    log(f"  --new-tokens {args.new_tokens} > --train-len {args.train_len}: the training prompts' "
                        f"rows predict only the first {args.train_len} tokens")
                rows = decode_rows(path, args, prompts_, f"{kind} batch {batch} {label}", data)
                key = f"batch{batch}" if label == "held_out" else f"batch{batch}_train_prompts"
                entry["decode"][key] = rows
                results["models"][kind] = entry
                Path(args.out).write_text(json.dumps(results, indent=2))  # after every row set: a kill keeps them
        results["models"][kind] = entry
        Path(args.out).write_text(json.dumps(results, indent=2))


def profile_steps(path: Path, args, vocab: int) -> dict:
    """Where a speculative step's time goes (``--profile``; untrained head, so every draft is rejected and each step
    is one verify + one draft, as at any acceptance): for plain decoding and each K at each batch, wall time per
    engine step, the GPU's kernel time per step (torch.profiler, CUDA activity) and so its idle share, device-to-host
    syncs per step, and the top host-side and GPU-side entries by self time."""
    from torch.profiler import ProfilerActivity, profile

    out = {}
    gpu = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if gpu else [ProfilerActivity.CPU]
    gen = torch.Generator().manual_seed(5)
    for batch in args.batches:
        prompts = [torch.randint(3, vocab, (args.prompt_len,), generator=gen).tolist() for _ in range(batch)]
        for k in [None, *args.k]:
            llm = LLM(path, dtype=args.dtype, device=args.device, max_num_seqs=batch, max_model_len=model_len(args),
                      speculative_tokens=k)
            llm.warmup()
            llm.generate(prompts, SamplingParams(max_new_tokens=8, ignore_eos=True))
            sync()
            t0 = time.perf_counter()
            with profile(activities=activities) as prof:
                llm.generate(prompts, SamplingParams(max_new_tokens=args.new_tokens, ignore_eos=True))
                sync()
            wall = time.perf_counter() - t0
            steps = llm.stats.steps  # generate() starts fresh stats
            events = prof.key_averages()
            gpu_us = sum(e.self_device_time_total for e in events if e.device_type.name == "CUDA")
            syncs = sum(e.count for e in events if e.key in ("cudaStreamSynchronize", "cudaDeviceSynchronize",
                                                              "cudaEventSynchronize", "aten::_local_scalar_dense"))
            host = sorted((e for e in events if e.device_type.name == "CPU"), key=lambda e: -e.self_cpu_time_total)
            kern = sorted((e for e in events if e.self_device_time_total > 0), key=lambda e: -e.self_device_time_total)
            phases = {e.key: round(e.cpu_time_total / steps, 1) for e in events if e.key.startswith("spec::")}
            row = {"steps": steps, "wall_ms_per_step": wall / steps * 1e3 if steps else None,
                   "spec_phase_host_us_per_step (incl. waits)": phases,
                   "gpu_kernel_ms_per_step": gpu_us / 1e3 / steps if steps else None,
                   "syncs_per_step": syncs / steps if steps else None,
                   "top_host_self_us_per_step": {e.key[:60]: round(e.self_cpu_time_total / steps, 1) for e in host[:14]},
                   "top_gpu_us_per_step": {e.key[:60]: round(e.self_device_time_total / steps, 1) for e in kern[:12]}}
            if llm.speculative is not None:
                row["speculative"] = llm.speculative.stats.as_dict()
            name = f"batch{batch} " + ("plain" if k is None else f"k{k}")
            out[name] = row
            log(f"{name}: {row['wall_ms_per_step']:.3f} ms/step wall, GPU kernels {row['gpu_kernel_ms_per_step']:.3f} "
                f"ms/step, {row['syncs_per_step']:.1f} syncs/step")
            log(f"    phases: {phases}")
            log(f"    host: {row['top_host_self_us_per_step']}")
            log(f"    gpu: {row['top_gpu_us_per_step']}")
            del llm
            free_memory()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["deepseek", "qwen3_next"], choices=list(SHAPES))
    ap.add_argument("--size", choices=["h200", "tiny"], default="h200")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--k", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--train-seqs", type=int, default=256)
    ap.add_argument("--train-len", type=int, default=128)
    ap.add_argument("--train-steps", type=int, default=300)
    ap.add_argument("--train-batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--checks", type=int, default=4, metavar="N",
                    help="teacher-forced checks on N training sequences (0: skip); see teacher_forced()")
    ap.add_argument("--controls", type=int, default=0, choices=[0, 1],
                    help="on a GPU, also run the first K with MODELGEN_BACKEND=torch (no Triton kernels)")
    ap.add_argument("--eager-k", type=int, nargs="*", default=[1, 2, 3], metavar="K",
                    help="on a GPU, also time these K with the speculative steps eager (MODELGEN_SPEC_GRAPHS=0)")
    ap.add_argument("--fixed-kernel-rows", type=int, default=0, choices=[0, 1],
                    help="on a GPU, also decode the batch-1 training prompt plain and with the first K with one "
                         "kernel per op whatever the row count (see fixed_kernels())")
    ap.add_argument("--plain-eager", type=int, default=1, choices=[0, 1],
                    help="on a GPU, also time plain decoding without CUDA graphs")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="wall-clock budget: decode rows that would start after it are skipped (listed in the JSON)")
    ap.add_argument("--layers", type=int, default=None,
                    help="override the shape's num_hidden_layers (Qwen3-Next repeats its layer schedule)")
    ap.add_argument("--profile", action="store_true",
                    help="only profile plain and speculative engine steps (untrained head; see profile_steps())")
    ap.add_argument("--out", default="bench/results/h200-mtp.json")
    args = ap.parse_args()
    args.deadline = time.monotonic() + args.budget_s if args.budget_s else float("inf")
    warnings.simplefilter("ignore")  # config keys of the HF configs the specs do not read
    results = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor(),
               "torch": torch.__version__, "args": {k: v for k, v in vars(args).items() if k != "deadline"},
               "rows": ROWS_MEANING, "models": {}}
    for kind in args.models:
        run_model(kind, args, results)
    Path(args.out).write_text(json.dumps(results, indent=2))
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
