"""Closure weight loaders for the neuron target, shaped like vLLM Neuron's (``weight_loader.py``).

The functional ops the generated neuron code calls (``NF``) are ``runtime/targets/neuron/functional.py``: they use the
kind folders' ops (attention, MoE), which themselves use these loaders, so the ops sit above ``runtime/layers/`` and
the loaders below it. On Neuron hardware the ops would dispatch to NKI kernels; here (torch-neuronx is not
installable) they run their torch fallbacks, as vLLM Neuron's CPU mode does.
"""
