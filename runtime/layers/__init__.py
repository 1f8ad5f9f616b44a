"""ATOM-style modules for the rocm target: parallel linear layers with ``weight_loader``s, norms, RoPE, attention."""
