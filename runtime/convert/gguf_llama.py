"""Convert a llama-architecture GGUF file into a Hugging Face-layout checkpoint directory.

The output directory holds what ``transformers.LlamaForCausalLM.from_pretrained`` and
``tokenizers.Tokenizer.from_file`` expect::

    config.json              LlamaConfig fields read from the GGUF's ``llama.*`` metadata
    generation_config.json   bos / eos (/ pad) token ids
    model.safetensors        every tensor dequantized, under Hugging Face parameter names
    tokenizer.json           byte-level BPE rebuilt from ``tokenizer.ggml.*`` metadata
    tokenizer_config.json    special tokens and the chat template

Two conventions differ between the files and need care:

* Tensor layout. GGUF lists a tensor's dimensions fastest-first (``ne0, ne1``); the numpy view that
  ``gguf.GGUFReader`` hands out is already row-major, so a linear layer comes out as
  ``[out_features, in_features]`` -- the layout ``torch.nn.Linear`` stores -- once dequantized.
* RoPE. llama.cpp rotates adjacent pairs of a head's dimensions (``x[2i], x[2i+1]``) whereas
  Hugging Face's Llama rotates the two halves of a head (``x[i], x[i + d/2]``, "rotate_half").
  llama.cpp's converter therefore reorders the rows of ``q_proj`` and ``k_proj`` within each head:
  row ``2i + c`` of a GGUF head is row ``c * d/2 + i`` of the Hugging Face head. This module undoes
  that (``unpermute_rope_rows``) so the checkpoint matches the Hugging Face layout.

The conversion is written into a temporary sibling directory and renamed into place at the end,
so a failure never leaves a half-written checkpoint at ``out_dir``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "convert_gguf_to_hf",
    "read_llama_hparams",
    "unpermute_rope_rows",
    "build_tokenizer",
]

CONFIG_NAME = "config.json"
GENERATION_CONFIG_NAME = "generation_config.json"
WEIGHTS_NAME = "model.safetensors"
TOKENIZER_NAME = "tokenizer.json"
TOKENIZER_CONFIG_NAME = "tokenizer_config.json"

# GGUF per-block tensor name -> Hugging Face name inside ``model.layers.{i}``.
_LAYER_TENSORS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}

# llama.cpp token types (llama_token_type / gguf.TokenType).
_TOKEN_NORMAL = 1
_TOKEN_UNKNOWN = 2
_TOKEN_CONTROL = 3
_TOKEN_USER_DEFINED = 4

_DTYPES = ("float32", "bfloat16", "float16")

_MISSING = object()


# --------------------------------------------------------------------------------------------
# Metadata
# --------------------------------------------------------------------------------------------


def _field(reader: Any, key: str, default: Any = _MISSING) -> Any:
    """The Python value of metadata ``key`` (lists for arrays); ``default`` when absent."""
    field = reader.fields.get(key)
    if field is None:
        if default is _MISSING:
            raise KeyError(key)
        return default
    return field.contents()


def _require(reader: Any, path: Path, key: str) -> Any:
    try:
        return _field(reader, key)
    except KeyError:
        raise ValueError(f"{path}: GGUF metadata key {key!r} is missing") from None


def _f32(value: float) -> float:
    """A float32 metadata value as the shortest decimal that round-trips (9.99999e-06 -> 1e-05)."""
    return float(str(np.float32(value)))


def read_llama_hparams(reader: Any, path: Path) -> dict[str, Any]:
    """The model hyper-parameters of a llama GGUF, under LlamaConfig's field names."""
    arch = _require(reader, path, "general.architecture")
    if arch != "llama":
        raise ValueError(
            f"{path}: general.architecture is {arch!r}; only 'llama' GGUF files can be converted"
        )

    def req(key: str) -> Any:
        return _require(reader, path, f"llama.{key}")

    def opt(key: str, default: Any = None) -> Any:
        return _field(reader, f"llama.{key}", default)

    hidden = int(req("embedding_length"))
    n_head = int(req("attention.head_count"))
    n_kv = int(opt("attention.head_count_kv", n_head))
    head_dim = int(opt("attention.key_length", 0) or 0) or (hidden // n_head if n_head else 0)
    if n_head <= 0 or n_kv <= 0 or n_head % n_kv:
        raise ValueError(f"{path}: bad head counts (head_count={n_head}, head_count_kv={n_kv})")
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"{path}: bad head dimension {head_dim} (hidden={hidden}, heads={n_head})")
    value_dim = int(opt("attention.value_length", head_dim) or head_dim)
    if value_dim != head_dim:
        raise ValueError(f"{path}: attention.value_length {value_dim} != key_length {head_dim}")
    rope_dim = int(opt("rope.dimension_count", head_dim) or head_dim)
    if rope_dim != head_dim:
        raise ValueError(
            f"{path}: partial rotary embeddings (rope.dimension_count={rope_dim}, head_dim={head_dim}) "
            "are not supported"
        )

    tokens = _field(reader, "tokenizer.ggml.tokens", None)
    vocab_size = opt("vocab_size")
    if vocab_size is None:
        vocab_size = len(tokens) if tokens is not None else None
    if vocab_size is None:
        raise ValueError(f"{path}: neither llama.vocab_size nor tokenizer.ggml.tokens is present")

    hp: dict[str, Any] = {
        "vocab_size": int(vocab_size),
        "hidden_size": hidden,
        "intermediate_size": int(req("feed_forward_length")),
        "num_hidden_layers": int(req("block_count")),
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "head_dim": head_dim,
        "max_position_embeddings": int(opt("context_length", 2048)),
        "rms_norm_eps": _f32(req("attention.layer_norm_rms_epsilon")),
        "rope_theta": _f32(opt("rope.freq_base", 10000.0)),
        "rope_scaling": _rope_scaling(reader, path),
    }
    return hp


def _rope_scaling(reader: Any, path: Path) -> dict[str, Any] | None:
    kind = _field(reader, "llama.rope.scaling.type", None)
    factor = _field(reader, "llama.rope.scaling.factor", None)
    if kind in (None, "none") and factor in (None, 0.0, 1.0):
        return None
    if kind in (None, "linear") and factor:
        return {"rope_type": "linear", "factor": _f32(factor)}
    raise ValueError(f"{path}: RoPE scaling type {kind!r} (factor {factor}) is not supported")


# --------------------------------------------------------------------------------------------
# Tensors
# --------------------------------------------------------------------------------------------


def unpermute_rope_rows(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's RoPE row permutation of a q/k projection (weight or bias).

    Within each head of ``d`` rows, llama.cpp stores Hugging Face row ``c * d/2 + i`` at row
    ``2i + c`` (c in {0, 1}). Viewing a head as ``[d/2, 2]`` and transposing it to ``[2, d/2]``
    restores the rotate_half order.
    """
    rows = weight.shape[0]
    if n_heads <= 0 or rows % n_heads or (rows // n_heads) % 2:
        raise ValueError(f"cannot split {rows} rows into {n_heads} heads of even size")
    head_dim = rows // n_heads
    heads = weight.reshape(n_heads, head_dim // 2, 2, *weight.shape[1:])
    return np.ascontiguousarray(heads.swapaxes(1, 2).reshape(weight.shape))


def _dequantize(tensor: Any) -> np.ndarray:
    from gguf.quants import dequantize

    array = dequantize(tensor.data, tensor.tensor_type)
    # GGUF lists dimensions fastest-first; numpy wants them slowest-first.
    shape = tuple(int(n) for n in reversed(list(tensor.shape)))
    array = np.asarray(array, dtype=np.float32).reshape(shape)
    if not array.flags.writeable:  # unquantized tensors come back as views of the memory map
        array = array.copy()
    return array


def _expected_shapes(hp: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    hidden, ffn, head_dim = hp["hidden_size"], hp["intermediate_size"], hp["head_dim"]
    q_rows = hp["num_attention_heads"] * head_dim
    kv_rows = hp["num_key_value_heads"] * head_dim
    return {
        "attn_q": (q_rows, hidden),
        "attn_k": (kv_rows, hidden),
        "attn_v": (kv_rows, hidden),
        "attn_output": (hidden, q_rows),
        "ffn_gate": (ffn, hidden),
        "ffn_up": (ffn, hidden),
        "ffn_down": (hidden, ffn),
        "attn_norm": (hidden,),
        "ffn_norm": (hidden,),
    }


def _collect_tensors(reader: Any, path: Path, hp: dict[str, Any]) -> tuple[dict[str, np.ndarray], bool, bool]:
    """Every tensor the checkpoint needs, dequantized, under Hugging Face names.

    Returns ``(tensors, tied, attention_bias)``.
    """
    by_name = {t.name: t for t in reader.tensors}
    shapes = _expected_shapes(hp)
    out: dict[str, np.ndarray] = {}

    def take(gguf_name: str, expected: tuple[int, ...]) -> np.ndarray:
        tensor = by_name.get(gguf_name)
        if tensor is None:
            raise ValueError(f"{path}: tensor {gguf_name!r} is missing")
        try:
            array = _dequantize(tensor)
        except NotImplementedError as exc:
            raise ValueError(
                f"{path}: tensor {gguf_name!r} has quantization type {tensor.tensor_type.name}, "
                f"which gguf cannot dequantize ({exc})"
            ) from exc
        if array.shape != expected:
            raise ValueError(
                f"{path}: tensor {gguf_name!r} has shape {array.shape}, expected {expected}"
            )
        return array

    tied = "output.weight" not in by_name
    bias_names = [f"blk.0.{n}.bias" for n in ("attn_q", "attn_k", "attn_v")]
    attention_bias = any(n in by_name for n in bias_names)
    if "rope_freqs.weight" in by_name:
        raise ValueError(f"{path}: a rope_freqs tensor (Llama-3 style RoPE scaling) is not supported")
    unused = [n for n in by_name if not _is_consumed(n, hp["num_hidden_layers"], tied, attention_bias)]
    if unused:
        raise ValueError(f"{path}: tensors not understood by the llama converter: {unused[:8]}")

    out["model.embed_tokens.weight"] = take("token_embd.weight", (hp["vocab_size"], hp["hidden_size"]))
    out["model.norm.weight"] = take("output_norm.weight", (hp["hidden_size"],))
    if not tied:
        out["lm_head.weight"] = take("output.weight", (hp["vocab_size"], hp["hidden_size"]))

    for i in range(hp["num_hidden_layers"]):
        for short, hf in _LAYER_TENSORS.items():
            array = take(f"blk.{i}.{short}.weight", shapes[short])
            if short == "attn_q":
                array = unpermute_rope_rows(array, hp["num_attention_heads"])
            elif short == "attn_k":
                array = unpermute_rope_rows(array, hp["num_key_value_heads"])
            out[f"model.layers.{i}.{hf}.weight"] = array
        if attention_bias:
            for short, heads in (
                ("attn_q", hp["num_attention_heads"]),
                ("attn_k", hp["num_key_value_heads"]),
                ("attn_v", None),
                ("attn_output", None),
            ):
                rows = shapes[short][0]
                name = f"blk.{i}.{short}.bias"
                if short == "attn_output" and name not in by_name:
                    continue  # filled with zeros below
                array = take(name, (rows,))
                if heads is not None:
                    array = unpermute_rope_rows(array, heads)
                out[f"model.layers.{i}.{_LAYER_TENSORS[short]}.bias"] = array

    if attention_bias:
        # LlamaConfig.attention_bias puts a bias on all four projections; o_proj's must exist too.
        for i in range(hp["num_hidden_layers"]):
            key = f"model.layers.{i}.self_attn.o_proj.bias"
            out.setdefault(key, np.zeros(hp["hidden_size"], dtype=np.float32))

    return out, tied, attention_bias


def _is_consumed(name: str, n_layers: int, tied: bool, attention_bias: bool) -> bool:
    if name in ("token_embd.weight", "output_norm.weight") or (name == "output.weight" and not tied):
        return True
    parts = name.split(".")
    if len(parts) != 4 or parts[0] != "blk" or not parts[1].isdigit() or int(parts[1]) >= n_layers:
        return False
    short, kind = parts[2], parts[3]
    if kind == "weight":
        return short in _LAYER_TENSORS
    return kind == "bias" and attention_bias and short in ("attn_q", "attn_k", "attn_v", "attn_output")


# --------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------

# Split patterns for the byte-level pre-tokenizers llama.cpp names in ``tokenizer.ggml.pre``.
_GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_LLAMA3_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table used by byte-level BPE."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\u00a1"), ord("\u00ac") + 1))
        + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    )
    table: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _pre_tokenizer(pre: str | None, path: Path):
    from tokenizers import Regex, pre_tokenizers

    if pre in (None, "default", "gpt-2", "gpt2"):
        return pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    if pre == "smollm":
        # SmolLM/SmolLM2: every digit is its own pre-token, then the GPT-2 split (llama.cpp's
        # LLAMA_VOCAB_PRE_TYPE_SMOLLM, and the Digits + ByteLevel pair of the original tokenizer).
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
            ]
        )
    if pre in ("llama3", "llama-v3", "llama-bpe", "smaug-bpe"):
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
            ]
        )
    raise ValueError(f"{path}: tokenizer.ggml.pre {pre!r} is not a supported pre-tokenizer")


def build_tokenizer(reader: Any, path: Path):
    """A ``tokenizers.Tokenizer`` equivalent to the byte-level BPE described by the GGUF metadata.

    Returns ``(tokenizer, info)`` where ``info`` holds the special token strings and flags.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors

    model = _field(reader, "tokenizer.ggml.model", None)
    if model is None:
        raise ValueError(f"{path}: GGUF metadata key 'tokenizer.ggml.model' is missing")
    if model != "gpt2":
        raise ValueError(
            f"{path}: tokenizer.ggml.model is {model!r}; only byte-level BPE ('gpt2') tokenizers "
            "can be converted"
        )
    tokens = list(_require(reader, path, "tokenizer.ggml.tokens"))
    merges_raw = list(_require(reader, path, "tokenizer.ggml.merges"))
    types = list(_field(reader, "tokenizer.ggml.token_type", [_TOKEN_NORMAL] * len(tokens)))
    if len(types) != len(tokens):
        raise ValueError(f"{path}: {len(types)} token types for {len(tokens)} tokens")

    alphabet = set(_bytes_to_unicode().values())
    byte_spelling = _bytes_to_unicode()
    vocab: dict[str, int] = {}
    for index, (token, kind) in enumerate(zip(tokens, types)):
        if kind == _TOKEN_NORMAL and not set(token) <= alphabet:
            # A normal token written as raw text: spell it in the byte alphabet BPE works in.
            token = "".join(byte_spelling[b] for b in token.encode("utf-8"))
        vocab.setdefault(token, index)

    merges: list[tuple[str, str]] = []
    for merge in merges_raw:
        parts = merge.split(" ")
        if len(parts) != 2:
            raise ValueError(f"{path}: malformed merge {merge!r} in tokenizer.ggml.merges")
        merges.append((parts[0], parts[1]))

    tok = Tokenizer(
        models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False)
    )
    tok.pre_tokenizer = _pre_tokenizer(_field(reader, "tokenizer.ggml.pre", None), path)
    tok.decoder = decoders.ByteLevel()

    special = [
        AddedToken(t, special=True, normalized=False)
        for t, kind in zip(tokens, types)
        if kind in (_TOKEN_CONTROL, _TOKEN_UNKNOWN)
    ]
    user = [
        AddedToken(t, special=False, normalized=False)
        for t, kind in zip(tokens, types)
        if kind == _TOKEN_USER_DEFINED
    ]
    if special:
        tok.add_special_tokens(special)
    if user:
        tok.add_tokens(user)
    if tok.get_vocab_size(with_added_tokens=True) != len(tokens):
        raise ValueError(
            f"{path}: rebuilt tokenizer has {tok.get_vocab_size(with_added_tokens=True)} tokens, "
            f"the file lists {len(tokens)} (duplicate token strings?)"
        )

    def token_of(key: str) -> str | None:
        idx = _field(reader, f"tokenizer.ggml.{key}", None)
        if idx is None or not 0 <= int(idx) < len(tokens):
            return None
        return tokens[int(idx)]

    add_bos = bool(_field(reader, "tokenizer.ggml.add_bos_token", False))
    add_eos = bool(_field(reader, "tokenizer.ggml.add_eos_token", False))
    bos, eos = token_of("bos_token_id"), token_of("eos_token_id")
    if (add_bos and bos is not None) or (add_eos and eos is not None):
        single = ([f"{bos}:0"] if add_bos and bos else []) + ["$A:0"] + ([f"{eos}:0"] if add_eos and eos else [])
        pair = single + ["$B:1"] + ([f"{eos}:1"] if add_eos and eos else [])
        specials = [(t, vocab[t]) for t in {bos if add_bos else None, eos if add_eos else None} if t]
        tok.post_processor = processors.TemplateProcessing(
            single=" ".join(single), pair=" ".join(pair), special_tokens=specials
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)

    info = {
        "bos_token": bos,
        "eos_token": eos,
        "unk_token": token_of("unknown_token_id"),
        "pad_token": token_of("padding_token_id"),
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "special_tokens": [t.content for t in special],
    }
    return tok, info


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def _token_id(reader: Any, key: str) -> int | None:
    value = _field(reader, f"tokenizer.ggml.{key}", None)
    return None if value is None else int(value)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _write_checkpoint(reader: Any, path: Path, tmp: Path, dtype: str) -> None:
    import torch
    from safetensors.torch import save_file

    hp = read_llama_hparams(reader, path)
    tokenizer, tok_info = build_tokenizer(reader, path)
    if tokenizer.get_vocab_size(with_added_tokens=True) != hp["vocab_size"]:
        raise ValueError(
            f"{path}: tokenizer has {tokenizer.get_vocab_size(with_added_tokens=True)} tokens but "
            f"llama.vocab_size is {hp['vocab_size']}"
        )
    tensors, tied, attention_bias = _collect_tensors(reader, path, hp)

    bos_id, eos_id = _token_id(reader, "bos_token_id"), _token_id(reader, "eos_token_id")
    pad_id = _token_id(reader, "padding_token_id")
    eot_id = _token_id(reader, "eot_token_id")

    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **{k: v for k, v in hp.items()},
        "hidden_act": "silu",
        "attention_bias": attention_bias,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "use_cache": True,
        "tie_word_embeddings": tied,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "torch_dtype": dtype,
    }
    _write_json(tmp / CONFIG_NAME, config)

    gen_eos: int | list[int] | None = eos_id
    if eot_id is not None and eot_id != eos_id:
        gen_eos = [i for i in (eos_id, eot_id) if i is not None]
    generation = {"bos_token_id": bos_id, "eos_token_id": gen_eos}
    if pad_id is not None:
        generation["pad_token_id"] = pad_id
    _write_json(tmp / GENERATION_CONFIG_NAME, generation)

    torch_dtype = getattr(torch, dtype)
    state = {
        name: torch.from_numpy(array).to(torch_dtype).contiguous() for name, array in tensors.items()
    }
    del tensors
    save_file(
        state,
        str(tmp / WEIGHTS_NAME),
        metadata={"format": "pt", "source": path.name, "converter": "modelgen.gguf_llama"},
    )
    del state

    tokenizer.save(str(tmp / TOKENIZER_NAME))
    tok_config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tok_info["bos_token"],
        "eos_token": tok_info["eos_token"],
        "unk_token": tok_info["unk_token"],
        "pad_token": tok_info["pad_token"],
        "add_bos_token": tok_info["add_bos_token"],
        "add_eos_token": tok_info["add_eos_token"],
        "clean_up_tokenization_spaces": False,
        "model_max_length": hp["max_position_embeddings"],
    }
    chat_template = _field(reader, "tokenizer.chat_template", None)
    if chat_template is not None:
        tok_config["chat_template"] = chat_template
    _write_json(tmp / TOKENIZER_CONFIG_NAME, tok_config)


def _relax_permissions(directory: Path) -> None:
    """mkdtemp makes a 0700 directory and safetensors a 0600 file; give them the usual modes."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)
    for child in directory.iterdir():
        os.chmod(child, 0o666 & ~umask)


def convert_gguf_to_hf(
    gguf_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    dtype: str = "float32",
    overwrite: bool = False,
) -> Path:
    """Convert the llama GGUF at ``gguf_path`` into a Hugging Face checkpoint at ``out_dir``.

    ``dtype`` is the safetensors dtype ("float32", "bfloat16" or "float16"); the GGUF's blocks are
    dequantized to float32 first. An existing non-empty ``out_dir`` is replaced only when
    ``overwrite`` is true (otherwise FileExistsError). Raises ValueError, naming the file, when it is
    not a llama GGUF or lacks a tensor or metadata key the checkpoint needs. Returns ``out_dir``.
    """
    from gguf import GGUFReader

    path = Path(gguf_path)
    out = Path(out_dir)
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {_DTYPES}, not {dtype!r}")
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty (pass overwrite=True to replace it)")

    try:
        reader = GGUFReader(str(path), "r")
    except Exception as exc:  # gguf raises ValueError / struct.error / OSError on junk
        raise ValueError(f"{path}: not a readable GGUF file ({exc})") from exc

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        _write_checkpoint(reader, path, tmp, dtype)
        del reader
        _relax_permissions(tmp)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.rename(out, old / out.name)
            try:
                os.rename(tmp, out)
            except BaseException:
                os.rename(old / out.name, out)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
