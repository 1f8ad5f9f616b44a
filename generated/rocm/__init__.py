"""Generated model packages for the rocm target (one per spec in specs/). Do not edit."""

# HF architecture (config.json `architectures`) -> model package under this one.
MODELS = {
    "Glm4MoeForCausalLM": "glm4_moe",
    "LlamaForCausalLM": "llama",
    "MixtralForCausalLM": "mixtral",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
}
