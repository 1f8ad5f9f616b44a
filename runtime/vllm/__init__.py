"""modelgen inside vLLM: what the generated ``generated/vllm/`` models need at run time, and the plugin that
registers them (``vllm.general_plugins`` entry point ``modelgen``).

Every module here except ``plugin`` imports vLLM; none is imported by modelgen's own engine.
"""
