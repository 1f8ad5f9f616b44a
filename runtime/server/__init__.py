"""An OpenAI-compatible HTTP server over one :class:`LLM` (``modelgen serve``): see app.py."""
