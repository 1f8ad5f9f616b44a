"""The engine: model registry, KV block manager, target runners, sampler and the generate loop."""
