"""Generated model packages for the neuron target (one per spec in specs/). Do not edit."""
