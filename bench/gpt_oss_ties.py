"""gpt-oss greedy agreement with transformers in bf16: near-ties or a bug? (CPU; bench/NOTES-quant.md has the figures)

A random gpt-oss (transformers' default initialisation, as bench/arch.py builds the benchmark model; 4 layers
alternating sliding-window / full attention, YaRN as released) at a chosen width, run greedily by transformers in
float32 and 16-bit and by modelgen's rocm module (torch path, or the GPU path through Triton's interpreter) in both;
at the first divergence from transformers of the same dtype: both systems' logits for the two tokens, the float32
top-2 margin, and each 16-bit system's error against float32. Writes /tmp/modelgen-gpt-oss-ties/result-*.json.

  python bench/gpt_oss_ties.py wide                      # SYSTEMS=torch32,torchlow (default), N_PROMPTS=4
  TRITON_INTERPRET=1 MODELGEN_TRITON_ON_CPU=1 SYSTEMS=gpu32,gpulow python bench/gpt_oss_ties.py wide

(16-bit is float16 under the interpreter, whose bfloat16 is not faithful: tests/gpu_helpers.py.)"""
import copy
import json
import os
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.environ.get("TRITON_INTERPRET") == "1":
    import tests.gpu_helpers  # noqa: F401,E402 -- the interpreter's loop-bound patch

from modelgen.runtime.engine.llm import LLM  # noqa: E402
from modelgen.runtime.engine.sampler import SamplingParams  # noqa: E402
from modelgen.runtime.ops import gpu  # noqa: E402


def use(system: str) -> None:
    """modelgen's GPU path (Triton kernels; the interpreter on CPU) for gpu*, the torch references for torch*."""
    os.environ["MODELGEN_BACKEND"] = "triton" if system.startswith("gpu") else "torch"
    gpu.refresh()


SIZE = sys.argv[1] if len(sys.argv) > 1 else "mid"
LOW = torch.float16 if os.environ.get("TRITON_INTERPRET") == "1" else torch.bfloat16
cfgs = {
    "mid": dict(hidden_size=512, intermediate_size=512, num_attention_heads=16, num_key_value_heads=4, head_dim=64,
                vocab_size=32000, num_hidden_layers=4, num_local_experts=8, num_experts_per_tok=4, sliding_window=128),
    "wide": dict(hidden_size=1024, intermediate_size=1024, num_attention_heads=16, num_key_value_heads=4, head_dim=64,
                 vocab_size=201088, num_hidden_layers=4, num_local_experts=8, num_experts_per_tok=4, sliding_window=128),
    "small": dict(hidden_size=256, intermediate_size=256, num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                  vocab_size=8192, num_hidden_layers=4, num_local_experts=8, num_experts_per_tok=4, sliding_window=32),
}
c = dict(cfgs[SIZE], swiglu_limit=7.0, attention_bias=True, max_position_embeddings=131072, rms_norm_eps=1e-5,
         rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                          "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False},
         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
L = c["num_hidden_layers"]
c["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)]
config = transformers.GptOssConfig(**c)
torch.manual_seed(0)
hf32 = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
ROOT = "/tmp/modelgen-gpt-oss-ties"
path = f"{ROOT}/{SIZE}"
if not os.path.exists(path + "/config.json"):
    hf32.save_pretrained(path)
hflow = copy.deepcopy(hf32).to(LOW)
PROMPT_LEN = int(os.environ.get("PROMPT_LEN", "128"))
NEW = 8
g = torch.Generator().manual_seed(1)
prompts = [torch.randint(100, c["vocab_size"] - 100, (PROMPT_LEN,), generator=g).tolist()
           for _ in range(int(os.environ.get("N_PROMPTS", "4")))]

@torch.no_grad()
def hf_greedy(m, p):
    ids = torch.tensor([p])
    out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, pad_token_id=0)
    return out[0, len(p):].tolist()

@torch.no_grad()
def hf_last(m, seq):
    return m(torch.tensor([seq])).logits[0, -1].float()

systems = os.environ.get("SYSTEMS", "torch32,torchlow").split(",")
res = {"size": SIZE, "low": str(LOW), "prompt_len": PROMPT_LEN, "rows": []}
llms = {}
for s in systems:
    dtype = torch.float32 if s.endswith("32") else LOW
    use(s)
    llms[s] = LLM(path, target="rocm", dtype=dtype, max_model_len=PROMPT_LEN + NEW + 8, cuda_graphs=False)
for i, p in enumerate(prompts):
    t0 = time.time()
    ref32, reflow = hf_greedy(hf32, p), hf_greedy(hflow, p)
    row = {"prompt": i, "hf32": ref32, "hf_low": reflow,
           "hf_low_vs_hf32": sum(a == b for a, b in zip(ref32, reflow))}
    for s, llm in llms.items():
        use(s)
        got = llm.generate([p], SamplingParams(max_new_tokens=NEW, ignore_eos=True))[0]
        ref = ref32 if s.endswith("32") else reflow
        agree = sum(a == b for a, b in zip(ref, got))
        r = {"tokens": got, "agree_vs_hf_same_dtype": agree, "agree_vs_hf32": sum(a == b for a, b in zip(ref32, got))}
        # first divergence vs HF of the same dtype: margins there, on the common prefix
        d = next((j for j, (a, b) in enumerate(zip(ref, got)) if a != b), None)
        if d is not None:
            seq = p + ref[:d]
            l32 = hf_last(hf32, seq); llow = hf_last(hflow, seq)
            ours = llm.score(seq)[-1].float()
            top32 = torch.topk(l32, 2)
            hf_tok, our_tok = ref[d], got[d]
            r["first_divergence"] = {
                "step": d, "hf_token": hf_tok, "modelgen_token": our_tok,
                "fp32_top2_margin": (top32.values[0] - top32.values[1]).item(),
                "fp32_logit_hf_minus_modelgen_token": (l32[hf_tok] - l32[our_tok]).item(),
                "modelgen_logit_modelgen_minus_hf_token": (ours[our_tok] - ours[hf_tok]).item(),
                "hf_same_dtype_logit_hf_minus_modelgen_token": ((llow if not s.endswith("32") else l32)[hf_tok] - (llow if not s.endswith("32") else l32)[our_tok]).item(),
                "max_abs_modelgen_vs_hf32": (ours - l32).abs().max().item(),
                "max_abs_hf_low_vs_hf32": (llow - l32).abs().max().item(),
                "logit_std": l32.std().item(),
            }
        row[s] = r
    res["rows"].append(row)
    print(json.dumps(row), f"{time.time() - t0:.0f}s", flush=True)
# teacher-forced per-position error statistics along the prompt
p = prompts[0]
with torch.no_grad():
    a32 = hf32(torch.tensor([p])).logits[0].float(); alow = hflow(torch.tensor([p])).logits[0].float()
stats = {"hf_low_vs_hf32_max": (alow - a32).abs().max().item(), "hf_low_vs_hf32_mean": (alow - a32).abs().mean().item()}
for s, llm in llms.items():
    use(s)
    o = llm.score(p).float()
    stats[f"{s}_vs_hf32_max"] = (o - a32).abs().max().item(); stats[f"{s}_vs_hf32_mean"] = (o - a32).abs().mean().item()
    top = torch.topk(a32, 2, dim=-1).values
    stats["hf32_top2_margin_median"] = (top[:, 0] - top[:, 1]).median().item()
    stats["hf32_argmax_agree_" + s] = (o.argmax(-1) == a32.argmax(-1)).float().mean().item()
stats["hf_low_argmax_agree"] = (alow.argmax(-1) == a32.argmax(-1)).float().mean().item()
res["teacher_forced_prompt0"] = stats
print(json.dumps(stats))
json.dump(res, open(f"{ROOT}/result-{SIZE}-{'+'.join(systems)}.json", "w"), indent=1)
