"""modelgen's thin shared runtime: ops with backends, paged KV cache, weight loading, sampling, the generate loop.

The runtime never reads specs. Generated modules (generated/<target>/<model>/) import it.
"""
