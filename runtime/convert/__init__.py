"""Converters that turn third-party model files into Hugging Face-layout checkpoint directories."""
