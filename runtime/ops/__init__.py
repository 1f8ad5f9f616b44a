"""Functional ops, one concern per file, each with its plain-torch reference implementation."""
