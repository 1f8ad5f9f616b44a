"""``modelgen new --from-hf DIR_OR_CONFIG``: draft a spec for a checkpoint from its ``config.json`` (+ safetensors
headers when present), as the delta over the closest existing spec.

1. The closest spec: every spec in specs/ is scored on what it would read of this config (its read and ignored keys
   against the config's keys, fields it reads that the config lacks), its ``model_type`` family (qwen2_moe ~
   qwen3_moe) and its architectures; the best three are then dry-run against the checkpoint's headers
   (``cli/coverage.py``: no weights read) and one whose generated model loads the checkpoint as is wins.
2. The draft ``extends:`` it and writes what it can read rather than guess: a key the base does not read but
   another spec reads into a field the base has (Mixtral's ``num_local_experts`` for Qwen3-MoE's ``num_experts``)
   becomes ``read: [key, ...]``, and so does a transformers alias of a base field the config lacks
   (``structure.HF_ALIASES``: ``moe_intermediate_size`` <- ``intermediate_size``); a key some spec ignores and none
   reads is listed under ``config_ignore:`` (a multimodal wrapper's vision fields); a feature another spec reads that
   this checkpoint switches off (``use_qk_norm: false``, ``clip_qkv: null``) is read and refused by name in
   ``requires:``; the RoPE style and known key uses (``structure.REFERENCE_USES``: Cohere's ``logit_scale``) are read
   from the installed transformers' modeling file of the family (as text, never imported).
3. Everything left is a ``# TODO`` comment, one per decision (the keys of one feature share a line:
   ``structure.FEATURE_GROUPS``): config keys no spec reads the base's way (with their values), nested RoPE keys the
   base does not implement, keys the base ignores that another spec reads, the base's ``requires:`` refusing this
   config, structure that differs, and the checkpoint tensors / parameters the base's model does not match (layer and
   expert indices folded to ``{i}``/``{e}``). A draft with no TODO builds as is; each TODO is a decision for the
   author. ``--exclude`` hides specs (and the specs extending them), to onboard a family as if it were new:
   tests/test_new_round_trip.py does so for nine families and verifies the answered drafts.

``config.json`` is untrusted (it comes from a model hub): every value of it that reaches the draft goes through
ruamel's YAML emitter (a string that is not a plain name is double-quoted and escaped), every comment through
:func:`_comment` (line breaks and other non-printables escaped, length bounded), and the text is parsed back before
it is returned: a key with a newline, ``: ``, ``#``, a tag or a quote cannot add a key to the spec. Values of the
wrong type where the draft needs a string (``architectures: 5``, ``model_type: {...}``) are refused in one line.
"""
from __future__ import annotations

import difflib
import importlib
import json
import re
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from modelgen.codegen.errors import ModelgenError
from modelgen.codegen.expr import short_repr
from modelgen.codegen.literal import comment_text
from modelgen.codegen.lower import SPECS_DIR, compile_spec
from modelgen.codegen.spec_file import display_path, load_spec
from modelgen.runtime.loader.files import MAX_CONFIG_BYTES, read_json_object

from .structure import (FEATURE_GROUPS, HF_ALIASES, config_structure, differences, modeling_rope_style, reference_uses,
                        spec_structure, ssm_keys)

DEPTH_COST = 0.75  # score lost per spec in a candidate's extends: chain
MAX_COMMENT = 1000  # characters of one comment line quoting config text (a long key must not make a huge line)
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")  # strings written unquoted: names, dotted keys, nothing YAML reads


class DraftError(ModelgenError):
    pass


@dataclass
class Candidate:
    spec: Path
    ir: Any
    score: float
    reasons: list[str] = field(default_factory=list)
    differs: list[str] = field(default_factory=list)  # how its structure differs from the config's (structure.py)
    unmatched: int | None = None  # tensors + parameters the dry run could not match (None: not run)
    coverage_error: str | None = None
    refused: str | None = None  # why no dry run could be made


@dataclass
class Draft:
    text: str
    base: Candidate
    todos: int


def _read_config(source: Path) -> tuple[dict[str, Any], Path | None]:
    from modelgen.runtime.checkpoint_dir import flatten_text_config

    path = source / "config.json" if source.is_dir() else source
    # The checkpoint loader's reader: regular files only (a FIFO or /dev/zero as config.json is refused, not read),
    # a byte bound, a nesting bound, one line naming the file for anything else.
    raw = read_json_object(path, DraftError, MAX_CONFIG_BYTES, what="config.json")
    if raw is None:
        raise DraftError(f"{path}: no such config.json")
    config = flatten_text_config(raw)
    if isinstance(raw.get("model_type"), str):
        # A multimodal wrapper's own model_type (qwen3_vl, not its text_config's qwen3_vl_text) names the family,
        # its transformers folder and the spec.
        config["model_type"] = raw["model_type"]
    archs = config.get("architectures")
    if archs is not None and (not isinstance(archs, list) or not all(isinstance(a, str) for a in archs)):
        raise DraftError(f"{path}: architectures: expected a list of strings, got {short_repr(archs)}")
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise DraftError(f"{path}: model_type: expected a string, got {short_repr(model_type)}")
    checkpoint = source if source.is_dir() and any(source.glob("*.safetensors")) else None
    return config, checkpoint


def _comment(text: str) -> str:
    """One ``# ...`` line quoting config text: line breaks (YAML's and Unicode's) escaped, length bounded."""
    text = comment_text(text)
    return "# " + (text if len(text) <= MAX_COMMENT else text[:MAX_COMMENT - 3] + "...")


def _scalar(value: str) -> str:
    """A config-derived string as the emitter should write it: a plain name unquoted, anything else double-quoted
    (ruamel escapes what needs it)."""
    return value if _PLAIN.fullmatch(value) else DoubleQuotedScalarString(value)


def _flow(items: Any) -> Any:
    """A flow-style (one-line) sequence or mapping."""
    node = CommentedMap(items) if isinstance(items, dict) else CommentedSeq(items)
    node.fa.set_flow_style()
    return node


def _emit(doc: CommentedMap) -> str:
    yaml = YAML(typ="rt")
    yaml.width = 4096  # no folding: one value per line
    out = StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def _plain_data(node: Any) -> Any:
    if isinstance(node, dict):
        return {str(k): _plain_data(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain_data(v) for v in node]
    return str(node) if isinstance(node, str) else node


def _parse_back(text: str, doc: CommentedMap) -> None:
    """The draft's text must read as exactly the document meant: the guard that no config text became YAML."""
    yaml = YAML(typ="safe", pure=True)
    try:
        parsed = yaml.load(text)
    except Exception as e:  # noqa: BLE001 - any parse failure of our own output is the same bug
        raise DraftError(f"internal error: the draft does not parse as YAML ({type(e).__name__})") from None
    if parsed != _plain_data(doc):
        raise DraftError("internal error: the draft does not read back as the spec it was meant to be")


def _top_keys(keys: tuple[str, ...]) -> set[str]:
    return {k.split(".", 1)[0] for k in keys}


def _read_keys(ir) -> set[str]:
    return set().union(*(_top_keys(v.keys) for v in ir.config_values if v.kind == "read"))


def _family(model_type: str) -> str:
    """qwen2_moe -> qwen, deepseek_v3 -> deepseek, glm4_moe -> glm: the letters before the first digit/underscore."""
    m = re.match(r"[a-z]+", model_type.lower())
    return m.group(0) if m else model_type


def checkpoint_tokens(checkpoint: Path | None) -> set[str]:
    """The module-name segments of a checkpoint's tensor names (``model.layers.0.mlp.experts.3.w1.weight`` ->
    mlp, experts, w1, ...), from the headers."""
    if checkpoint is None:
        return set()
    from modelgen.runtime.loader.checkpoint import Checkpoint

    with Checkpoint(checkpoint, check_finite="off") as ck:
        return {part for key in ck.keys() for part in key.split(".")[:-1] if not part.isdigit()}


def _generated_tokens(name: str) -> set[str]:
    """Identifiers of a spec's generated rocm package (its module names, packed/expert/ignore tables)."""
    from modelgen.codegen.build import GENERATED_DIR

    out: set[str] = set()
    for p in (GENERATED_DIR / "rocm" / name).glob("*.py"):
        out |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", p.read_text(encoding="utf-8")))
    return out


def score_candidates(config: dict[str, Any], specs: list[Path], tokens: set[str] = frozenset(),
                     exclude: tuple[str, ...] = ()) -> list[Candidate]:
    """Every spec that builds, best first. ``tokens``: the checkpoint's module-name segments, compared with the
    names in each spec's generated package (a checkpoint with ``experts``/``linear_attn`` modules points at a spec
    generating them); ``exclude``: spec names left out together with every spec that ``extends:`` one of them
    (directly or through others), since such a child carries the excluded family's knowledge."""
    from modelgen.runtime.hf_config import GENERIC_CONFIG_KEYS

    keys = {k for k in config if k not in GENERIC_CONFIG_KEYS and not k.startswith("_")}
    want = config_structure(config)
    archs = set(config.get("architectures") or [])
    model_type = str(config.get("model_type") or "")
    out = []
    for spec in specs:
        try:
            ir = compile_spec(spec)
        except ModelgenError:
            continue  # a broken spec is no base
        if any(Path(name).stem in exclude for name, _ in ir.sources):
            continue
        known = _read_keys(ir) | set(ir.config_ignore)
        overlap = len(keys & known) / max(len(keys), 1)
        unknown_read = len(_read_keys(ir) - set(config) - {"rope_scaling", "rope_theta"})  # fields the config lacks
        # A less specialised base (fewer specs in its extends: chain) wins a near tie: it carries fewer of another
        # family's decisions into the draft (ERNIE from llama.yaml rather than from qwen3_vl.yaml).
        depth = len(ir.sources) - 1
        score = 20 * overlap - 0.5 * unknown_read - DEPTH_COST * depth
        reasons = [f"reads or ignores {len(keys & known)}/{len(keys)} of its config keys"]
        if archs & set(ir.architectures):
            score += 100
            reasons.append(f"already serves {', '.join(sorted(archs & set(ir.architectures)))}")
        if model_type and _family(model_type) == _family(ir.model_type):
            score += 5
            reasons.append(f"same family as model_type {ir.model_type}")
        score += 3 * difflib.SequenceMatcher(None, model_type, ir.model_type).ratio()
        if tokens:
            names = len(tokens & _generated_tokens(ir.name)) / len(tokens)
            score += 10 * names
            reasons.append(f"its generated model names {100 * names:.0f}% of the checkpoint's module names")
        differs = differences(want, spec_structure(ir))
        score -= sum(cost for cost, _ in differs)
        if not differs:
            reasons.append("same structure (" + ", ".join(sorted(want.kinds)) + ")")
        out.append(Candidate(spec, ir, score, reasons, [line for _, line in differs]))
    return sorted(out, key=lambda c: -c.score)


def _dry_run(candidate: Candidate, checkpoint: Path, aliases: dict[str, str] | None = None) -> None:
    """Unmatched tensors/parameters of the candidate's generated model on the checkpoint (headers only);
    ``aliases``: config key -> the key whose value it takes (the draft's alias bindings, seen by the base's reader)."""
    from modelgen.runtime.checkpoint_dir import CheckpointDir

    from .coverage import checkpoint_coverage

    candidate.coverage_error = candidate.refused = None
    try:
        module = importlib.import_module(f"modelgen.generated.rocm.{candidate.ir.name}")
        ckdir = CheckpointDir(checkpoint)
        ckdir.hf_config = {**ckdir.hf_config, **{k: ckdir.hf_config[a] for k, a in (aliases or {}).items()}}
        report = checkpoint_coverage(module, ckdir, "rocm")
    except Exception as e:  # refused config (the requires: TODO says so), an unbuilt spec: no dry run possible
        candidate.unmatched, candidate.refused = 10**6, f"{type(e).__name__}: {e}".splitlines()[0]
        return
    errors = "\n".join(r.error for r in report.ranks if r.error)
    candidate.coverage_error = errors or None
    candidate.unmatched = len(re.findall(r"^    \S", errors, re.MULTILINE)) if errors else 0
    if errors and not candidate.unmatched:
        candidate.unmatched = 1  # one shape error


def _fold(name: str) -> str:
    """model.layers.3.mlp.experts.7.w1.weight -> model.layers.{i}.mlp.experts.{e}.w1.weight"""
    name = re.sub(r"(\.layers\.)\d+\.", r"\1{i}.", name)
    return re.sub(r"(\.experts\.)\d+\.", r"\1{e}.", name)


def _folded(lines: list[str]) -> list[str]:
    counts: dict[str, int] = {}
    for line in lines:
        counts[_fold(line)] = counts.get(_fold(line), 0) + 1
    return [f"{k}" + (f" (x{n})" if n > 1 else "") for k, n in counts.items()]


def _identifier(text: str, pattern: str, fallback: str) -> str:
    return text if re.fullmatch(pattern, text) else fallback


def _value(config: dict[str, Any], dotted: str) -> str:
    node: Any = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    text = json.dumps(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _rope_style_blocks(model_type: str, base: Path) -> CommentedMap | None:
    """``blocks:`` overrides setting each rotary block of ``base`` to the RoPE style transformers' modeling file
    uses for this family (structure.modeling_rope_style), where the base's differs: read from the reference, not
    guessed, so no TODO (Cohere, ERNIE 4.5 and GLM-4 rotate pairs where Llama rotates halves)."""
    found = modeling_rope_style(model_type)
    if found is None:
        return None  # draft_spec writes the TODO
    style, where = found
    out = CommentedMap()
    for name, block in load_spec(base)[0].blocks.items():
        rope = getattr(getattr(block, "attention", None), "rope", None)
        if rope is not None and rope.enabled is not False and rope.style != style:
            out[name] = CommentedMap([("attention", CommentedMap([("rope", _flow({"style": style}))]))])
            out[name]["attention"].yaml_add_eol_comment(_comment(f"as {where} does ({base.name}: {rope.style})"),
                                                        "rope")
    return out or None


def _base_sets(base: Path, entries: dict[str, Any]) -> bool:
    """Whether the base spec (resolved) already sets one of ``entries``' fields (``lm_head.divide_by``)."""
    spec = load_spec(base)[0]
    return any(getattr(getattr(spec, top, None), sub, None) is not None
               for top, fields in entries.items() for sub in fields)


def _norm_layout_hints(checkpoint: Path | None, base: Path) -> list[str]:
    """What the checkpoint's per-layer norm tensors say about the residual layout, where it differs from the base's
    first block: one norm per layer where the base has two suggests attention and MLP sharing it in parallel
    (Cohere); names only, from the headers."""
    if checkpoint is None:
        return []
    from modelgen.runtime.loader.checkpoint import Checkpoint

    with Checkpoint(checkpoint, check_finite="off") as ck:
        have = sorted({m.group(1) for key in ck.keys()
                       if (m := re.search(r"\.layers\.0\.([A-Za-z0-9_]*norm[A-Za-z0-9_]*)\.weight$", key))})
    block = next(iter(load_spec(base)[0].blocks.values()))
    want = [n.name for n in (getattr(block, f, None) for f in ("attention_norm", "mlp_norm", "attention_post_norm",
                                                              "mlp_post_norm")) if n is not None]
    if len(have) == 1 and len(want) == 2 and not getattr(block, "parallel", None):
        return [f"each layer has one norm ({have[0]}) where {base.name} has two ({', '.join(want)}): attention and "
                f"MLP likely share it in parallel (`parallel: true`, out = x + attn(norm(x)) + mlp(norm(x)))"]
    return []


def _read_by(readers: list[tuple[str, str]]) -> str:
    """`` (read by a.yaml, b.yaml and 3 more)``: who reads a key, bounded."""
    names = sorted({s for s, _ in readers})
    if not names:
        return ""
    return f" (read by {', '.join(names[:4])}" + (f" and {len(names) - 4} more)" if len(names) > 4 else ")")


def _config_keys(config: dict[str, Any], base: Candidate, candidates: list[Candidate],
                 served: list[str]) -> tuple[CommentedMap, CommentedSeq, CommentedSeq, list[str], dict[str, str],
                                          dict[str, Any]]:
    """The draft's ``config:`` bindings, its ``config_ignore:``, its added ``requires:``, its config TODO lines and
    its alias bindings (config key -> the key read into it) and top-level entries using keys it reads
    (``lm_head: {divide_by: 1.0 / logit_scale}``).

    A key (top level, or inside a mapping the base reads: ``rope_parameters.partial_rotary_factor``) the base does
    not read is, in this order: bound into a base field another spec reads it into (``as X reads it``); listed under
    ``config_ignore:`` when some spec ignores it and no spec reads it (the vision fields of a multimodal wrapper;
    the comment names who ignores it); else a TODO. TODOs of one feature (the sliding-window keys, the NoPE
    keys, the µP multipliers: structure.FEATURE_GROUPS) share one line: one decision, not one per key.

    A feature another spec reads that this checkpoint switches off (every key of its group ``false``, or ``null``
    where another spec reads the key as nullable: ``use_qk_norm: false``, ``clip_qkv: null``) is no guess: the draft reads the keys and
    refuses the feature by name when a config turns it on (``requires:``), since the base does not generate it."""
    from modelgen.runtime.config_nesting import nested_unread_keys
    from modelgen.runtime.hf_config import GENERIC_CONFIG_KEYS

    ir = base.ir
    base_read = _read_keys(ir) | set(ir.config_ignore)
    by_key: dict[str, list[tuple[str, str]]] = {}  # config key -> [(spec, field)] of every spec reading it
    ignored_by: dict[str, list[str]] = {}  # config key (dotted for nested ones) -> specs listing it in config_ignore
    for c in candidates:
        for v in c.ir.config_values:
            if v.kind == "read":
                for k in set(v.keys) | _top_keys(v.keys):
                    by_key.setdefault(k, []).append((c.spec.name, v.name))
        for k in c.ir.config_ignore:
            ignored_by.setdefault(k, []).append(c.spec.name)
    base_fields = {v.name: v for v in ir.config_values if v.kind == "read"}
    fields_by_key: dict[str, list[Any]] = {}  # config key -> the ConfigValues other specs read it into
    for c in candidates:
        for v in c.ir.config_values:
            if v.kind == "read":
                for k in v.keys:
                    fields_by_key.setdefault(k, []).append(v)
    bindings, ignores, refusals = CommentedMap(), CommentedSeq(), CommentedSeq()
    todo: dict[str, list[tuple[str, str]]] = {}  # group (or the key itself) -> [(key, why)]

    def ignore(key: str) -> bool:
        who = sorted(set(ignored_by.get(key, [])))
        if not who or by_key.get(key):
            return False
        ignores.append(_scalar(key))
        ignores.yaml_add_eol_comment(_comment(f"ignored by {', '.join(who)} (read by no spec)"), len(ignores) - 1)
        return True

    def todo_for(key: str, why: str) -> None:
        group = next((g for g, keys in FEATURE_GROUPS.items() if key.split(".")[-1] in keys), key)
        todo.setdefault(group, []).append((key, why))

    def off_type(key: str) -> str | None:
        """The field type to read an off feature's key as (None: not off, or no type known)."""
        if "." in key or key in bindings or not by_key.get(key):  # no spec reads it: what it does is unknown
            return None
        if config.get(key) is False:
            return "bool"
        nullable = [v for v in fields_by_key.get(key, []) if key in v.null_keys]
        return nullable[0].reader.removeprefix("read_") if config.get(key) is None and key in config and nullable \
            else None

    # A base field none of whose keys the config has, under another name transformers uses for the same value
    # (structure.HF_ALIASES: OLMoE's experts are intermediate_size wide, Qwen3-MoE's moe_intermediate_size).
    aliased: dict[str, str] = {}  # the field's first config key -> the alias read into it
    for fld, v in base_fields.items():
        alias = next((a for a in HF_ALIASES.get(fld, ()) if config.get(a) is not None), None)
        if alias and not any(config.get(k) is not None for k in v.keys) and (alias not in base_read or v.required):
            bindings[fld] = _flow({"type": v.reader.removeprefix("read_"), "read": _flow([_scalar(k) for k in
                                                                                         (*v.keys, alias)])})
            bindings.yaml_add_eol_comment(_comment(f"{alias}: the same value under the name transformers gives it "
                                                   "in families without {fld}".replace("{fld}", fld)), fld)
            aliased[v.keys[0]] = alias
    # Keys whose use transformers' modeling file of this family shows (structure.REFERENCE_USES), where the base
    # has no field of that name: the field and its use are written, with the file they were read from.
    uses: dict[str, Any] = {}
    used = reference_uses(str(config.get("model_type") or ""),
                          {k for k in config if k not in base_read and k not in base_fields})
    for key, (ftype, entries, where) in used.items():
        if _base_sets(base.spec, entries):  # the base already fills that entry (Granite's own logits divisor)
            continue
        bindings[key] = _flow({"type": ftype, "default": config[key]})
        bindings.yaml_add_eol_comment(_comment(f"used as {where} uses it"), key)
        uses.update(entries)
        aliased[key] = key
    # Keys the base does not read at all.
    for key in sorted(k for k in config if k not in GENERIC_CONFIG_KEYS and k not in base_read | set(aliased.values())):
        elsewhere = [(s, f) for s, f in by_key.get(key, []) if f in base_fields and f not in bindings]
        if elsewhere:
            spec_name, fld = elsewhere[0]
            keys = [key] + [k for k in base_fields[fld].keys if k != key]
            ftype = base_fields[fld].reader.removeprefix("read_")  # restated: the base may use the `x: int` shorthand
            bindings[fld] = _flow({"type": ftype, "read": _flow([_scalar(k) for k in keys])})
            bindings.yaml_add_eol_comment(_comment(f"{key}: as {spec_name} reads it"), fld)
            continue
        if ignore(key):
            continue
        todo_for(key, f" not read by {base.spec.name}{_read_by(by_key.get(key, []))}")
    # Keys the base declares irrelevant (config_ignore: is never inherited: it is one family's knowledge). One
    # no spec reads is ignored again, with who ignores it; one another spec reads is a decision again (Qwen3
    # ignores sliding_window because use_sliding_window gates it; Mixtral has no such gate).
    for key in ir.config_ignore:
        if served or "." in key or config.get(key) is None or ignore(key):
            continue
        todo_for(key, f" in {base.spec.name}'s config_ignore: but read elsewhere{_read_by(by_key.get(key, []))}; "
                      "confirm it does not change this family's forward pass")
    # Inside the mappings the base reads (rope_parameters): sub-keys it neither reads nor implements.
    read_dotted = [k for v in ir.config_values if v.kind == "read" for k in v.keys]
    # (the base's own config_ignore: entries are not passed: they are not inherited, so each is listed again below
    # or becomes a TODO, like a top-level one)
    unread, unimplemented = nested_unread_keys(config, read_dotted)
    for key in sorted(set(unread) | set(unimplemented)):
        if served or ignore(key):
            continue
        leaf = key.split(".")[-1]
        todo_for(key, f" not implemented by {base.spec.name}{_read_by(by_key.get(key, []) + by_key.get(leaf, []))}")
    lines = []
    for group, parts in todo.items():
        types = {key: off_type(key) for key, _ in parts}
        if all(types.values()):
            for key, ftype in types.items():
                bindings[key] = _flow({"type": ftype, "nullable": True, "default": None} if ftype != "bool"
                                      else {"type": ftype, "default": False})
                others = sorted({s for s, _ in by_key.get(key, [])})
                refusals.append(CommentedMap([
                    ("check", f"not {key}" if ftype == "bool" else f"{key} is None"),
                    ("message", DoubleQuotedScalarString(
                        f"{key} is not generated by this spec (off in the checkpoint it was drafted from"
                        + (f"; {', '.join(others[:4])} read{'s' if len(others) == 1 else ''} it" if others else "")
                        + ")"))]))
            continue
        head = f"TODO config: {group}: " if group in FEATURE_GROUPS else "TODO config: "
        whys = sorted({why for _, why in parts})
        values = ", ".join(f"'{key}' = {_value(config, key)}" for key, _ in parts)
        lines.append(_comment(head + values + "".join(whys) if len(whys) == 1 else
                              head + "; ".join(f"'{key}' = {_value(config, key)}{why}" for key, why in parts)))
    return bindings, ignores, refusals, lines, aliased, uses


def draft_spec(source: str | Path, specs: list[Path] | None = None, exclude: tuple[str, ...] = (),
               base: str | Path | None = None) -> Draft:
    """Draft a spec for ``source`` (a checkpoint directory or a config.json); ``exclude``: specs (names or paths)
    that neither serve as the base nor lend their knowledge, nor do the specs extending them (``new --exclude``;
    onboarding an existing family as if it were new); ``base``: the spec to extend, chosen
    by the author instead of by score (the other specs still supply config-key spellings)."""
    from modelgen.runtime.hf_config import GENERIC_CONFIG_KEYS, ConfigError

    source = Path(source)
    config, checkpoint = _read_config(source)
    exclude = tuple(Path(e).stem for e in exclude)  # a spec name or its path
    specs = [s for s in (specs if specs is not None else sorted(SPECS_DIR.glob("*.yaml"))) if s.stem not in exclude]
    candidates = score_candidates(config, specs, checkpoint_tokens(checkpoint), exclude)
    if not candidates:
        raise DraftError("no spec in specs/ builds, so there is nothing to extend")
    if checkpoint is not None:
        for c in candidates[:3]:
            _dry_run(c, checkpoint)
        # A base whose model loads this checkpoint as is beats one that does not; otherwise the config score decides
        # (a dry run stops at the first shape error, so its count is no measure of distance).
        candidates[:3] = sorted(candidates[:3], key=lambda c: (c.unmatched != 0, -c.score))
    if base is not None:
        chosen = [c for c in candidates if c.spec.resolve() == Path(base).resolve()]
        if not chosen:
            raise DraftError(f"{base}: not a spec of specs/ that builds")
        candidates.remove(chosen[0])
        candidates.insert(0, chosen[0])
        if checkpoint is not None and chosen[0].unmatched is None:
            _dry_run(chosen[0], checkpoint)
        chosen[0].reasons.insert(0, "chosen with --base")
    base = candidates[0]
    ir = base.ir
    archs = list(config.get("architectures") or ["TODOForCausalLM"])
    model_type = str(config.get("model_type") or "todo")
    name = _identifier(re.sub(r"[^a-z0-9_]", "_", model_type.lower()), r"[a-z][a-z0-9_]*", "todo_model")
    # Ernie4_5ForCausalLM -> Ernie45: the class name less its head, without the underscores class names avoid
    prefix = re.sub(r"_", "", re.sub(r"For(CausalLM|ConditionalGeneration)$", "", archs[0]))
    prefix = _identifier(prefix, r"[A-Z][A-Za-z0-9]*", "Todo")

    todos: list[str] = []
    # Every name the draft made up rather than read is a TODO of its own (a made-up class_prefix builds, and
    # would name the generated classes Todo* unnoticed).
    guesses = []
    if not config.get("architectures"):
        guesses.append("TODO hf.architectures: config.json has none; TODOForCausalLM is a placeholder")
    if name != re.sub(r"[^a-z0-9_]", "_", model_type.lower()) or not config.get("model_type"):
        guesses.append(f"TODO name: '{name}' is a placeholder (model_type {short_repr(model_type)} is no spec name)")
    if prefix == "Todo":
        guesses.append(f"TODO class_prefix: 'Todo' is a placeholder ({short_repr(archs[0])} gives no class name)")
    mamba = ssm_keys(config)
    mixer = "mamba2" if {"mamba2", "mamba"} & config_structure(config).kinds == {"mamba2"} else "mamba"
    if mamba and mixer not in spec_structure(ir).kinds:
        # Said first and plainly: the base's layers cannot serve this model's mixer, whatever the other TODOs say.
        guesses.append(f"TODO layer kind: state-space config keys ({', '.join(mamba[:6])}) describe a {mixer} mixer, "
                       f"which {display_path(base.spec)} has none of; start from a spec with `kind: {mixer}` blocks")
    guesses += [f"TODO structure: {line}" for line in base.differs
                if not (mamba and line.startswith(f"the config has a {mixer} layer"))]
    lines = [
        _comment(f"Draft spec for {', '.join(archs)} (model_type {model_type}), written by `modelgen new --from-hf "
                 f"{source}`."),
        _comment(f"Closest existing spec: {display_path(base.spec)} ({'; '.join(base.reasons)}"
                 + (f"; no header-only dry run: {base.refused}" if base.refused else
                    f"; {base.unmatched} unmatched checkpoint names in a header-only dry run"
                    if base.unmatched is not None else "") + ")."),
        "# Review every TODO (each is a decision: bind the key and use it, or list it under config_ignore: when it",
        "# does not change the forward pass), then: modelgen verify <this file> && modelgen build <this file>.",
        _comment(f"Check against: transformers/models/{model_type}/modeling_{model_type}.py"),
    ]
    served = sorted(set(archs) & set(ir.architectures))
    if served:
        lines.append(_comment(f"NOTE: {', '.join(served)} is already served by {display_path(base.spec)}; two specs "
                              "cannot serve one architecture, so this draft replaces it or needs other architectures."))
    if guesses:
        todo = [_comment(g) for g in guesses]
        lines += todo
        todos += todo
    header_lines = len(lines)
    doc = CommentedMap()
    doc["extends"] = base.spec.name
    doc["name"] = name
    doc["class_prefix"] = prefix
    doc["description"] = DoubleQuotedScalarString(
        f"{prefix} decoder (drafted from {base.spec.name}; describe what differs)")
    doc["hf"] = CommentedMap([
        ("architectures", _flow([_scalar(a) for a in archs])),
        ("model_type", _scalar(model_type)),
        ("modeling", _scalar(f"transformers/models/{model_type}/modeling_{model_type}.py")),
    ])
    bindings, ignores, refusals, unread, aliased, uses = _config_keys(config, base, candidates, served)
    aliased = {k: a for k, a in aliased.items() if k != a}
    if aliased:  # the base's reader and dry run see the config as the draft reads it
        config = {**config, **{k: config[a] for k, a in aliased.items()}}
        if checkpoint is not None:
            _dry_run(base, checkpoint, aliased)
    if bindings:
        doc["config"] = bindings
    if ignores:
        doc["config_ignore"] = ignores
    rope = _rope_style_blocks(model_type, base.spec)
    if rope:
        doc["blocks"] = rope
    if modeling_rope_style(model_type) is None and any(k in ir.kinds for k in ("gqa", "mla")):
        todo = _comment(f"TODO structure: RoPE style not read (no rotate_half in an installed transformers/models/"
                        f"{model_type}/modeling_{model_type}.py); {base.spec.name} rotates halves unless its blocks "
                        "say `style: pairwise`: check which one the family uses")
        lines.append(todo)
        todos.append(todo)
    for entry, value in uses.items():
        doc[entry] = _flow(value)
    if refusals:  # a child's list replaces its base's: the base's requires: are restated first
        doc["requires"] = CommentedSeq([CommentedMap([("check", DoubleQuotedScalarString(r.check)),
                                                      ("message", DoubleQuotedScalarString(r.message))])
                                        for r in load_spec(base.spec)[0].requires] + list(refusals))
    if unread:
        lines += [""] + unread
        todos += unread
    # The base's requires: against this config (with the bindings above the reader may differ; best effort).
    try:
        module = importlib.import_module(f"modelgen.generated.rocm.{ir.name}")
        module.CONFIG_CLASS.from_hf_config(config)
    except ImportError:
        pass
    except (ConfigError, TypeError, ValueError, ArithmeticError, LookupError, RecursionError) as e:
        # ConfigError names the field; the others are a hostile value the generated reader did not expect (the
        # runtime's config validation is its own): either way a decision for the author, not a traceback here.
        first = (str(e).splitlines() or [type(e).__name__])[0]
        todo = _comment(f"TODO requires: {base.spec.name} refuses this config: {first}")
        lines += ["", todo]
        todos.append(todo)
    # Checkpoint names against the base's generated model (headers only).
    if base.coverage_error:
        names = re.findall(r"^    (\S+)", base.coverage_error, re.MULTILINE)
        detail = _folded(names) if names else [base.coverage_error.splitlines()[0]]
        todo = [f"# TODO checkpoint: {base.spec.name}'s model does not match these names/shapes (fix checkpoint: "
                f"prefix / fuse / rename / ignore / experts, or the blocks):"] + [_comment(f"  {d}") for d in detail[:12]]
        if len(detail) > 12:
            todo.append(f"#   ... and {len(detail) - 12} more")
        todo += [_comment(f"  hint: {h}") for h in _norm_layout_hints(checkpoint, base.spec)]
        lines += [""] + todo
        todos.append(todo[0])
    elif base.refused:
        lines += ["", _comment(f"checkpoint names not checked: the base cannot build a model for this config yet (see "
                               f"the TODOs above); then run `modelgen coverage <this file> {checkpoint}`")]
    elif checkpoint is not None:
        lines += ["", _comment(f"checkpoint: every tensor of {checkpoint} matches {base.spec.name}'s model (header-only "
                               "dry run)")]
    header, tail = lines[:header_lines], lines[header_lines:]
    text = "\n".join(header) + "\n" + _emit(doc) + "".join(line + "\n" for line in tail)
    _parse_back(text, doc)
    return Draft(text, base, len(todos))
