"""Tokenizer from a checkpoint's ``tokenizer.json`` (``tokenizers``), with chat templates from
``tokenizer_config.json`` rendered in a sandboxed Jinja2 environment (templates are data, not code)."""
from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer


class Tokenizer:
    def __init__(self, tokenizer: _HFTokenizer, config: dict):
        self.tok = tokenizer
        self.config = config

    @classmethod
    def from_checkpoint(cls, directory: str | Path) -> "Tokenizer | None":
        directory = Path(directory)
        path = directory / "tokenizer.json"
        if not path.exists():
            return None
        cfg_path = directory / "tokenizer_config.json"
        config = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.exists() else {}
        return cls(_HFTokenizer.from_file(str(path)), config)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def _special(self, key: str) -> str:
        value = self.config.get(key)
        return value.get("content", "") if isinstance(value, dict) else (value or "")

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        template = self.config.get("chat_template")
        if not template:
            raise ValueError("the checkpoint's tokenizer_config.json has no chat_template")

        def raise_exception(message: str) -> None:
            raise ValueError(f"chat template: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        return env.from_string(template).render(
            messages=messages, add_generation_prompt=add_generation_prompt,
            bos_token=self._special("bos_token"), eos_token=self._special("eos_token"),
        )

    def encode_chat(self, user_message: str) -> list[int]:
        """One user turn rendered with the chat template (special tokens come from the template text)."""
        return self.encode(self.apply_chat_template([{"role": "user", "content": user_message}]), add_special_tokens=False)
