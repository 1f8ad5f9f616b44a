"""Building blocks for the neuron target, shaped like vLLM Neuron's (``functional`` as NF, closure weight loaders).

On Neuron hardware the functional ops would dispatch to NKI kernels; here (torch-neuronx is not installable) they run
their torch fallbacks, as vLLM Neuron's CPU mode does. Everything is shape-static and traceable by
``torch.compile(fullgraph=True)``.
"""
