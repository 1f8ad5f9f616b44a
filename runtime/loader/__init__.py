"""Runtime weight loader: reads safetensors checkpoints and maps them onto generated models."""
