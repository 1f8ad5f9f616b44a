"""``modelgen verify SPEC``: does the code generated from a spec compute what transformers computes?

For every architecture the spec names (``hf.architectures``) a tiny random transformers model is built
(``runtime/testing/tiny_models.py``: GQA, 4 layers, every layer kind of the family's schedule, windows and sparse
top-k shorter than the prompt) and saved with ``save_pretrained``. The spec is rendered for each target into a
temporary package (so a spec can be verified before ``modelgen build`` writes generated/), and every target runs the
checkpoint through it. Checks, each reported on one line:

``config``         the spec reads or ignores every config.json key (``--strict-config``: an unread key is a failure,
                   since the generated model would not honour it);
``fp32 logits``    prefill logits against transformers' in float32: max abs error <= ``FP32_ATOL`` (on failure, the
                   decoder layers' outputs compared one by one name the first layer that diverges);
``greedy``         ``GREEDY_TOKENS`` greedy tokens equal transformers' (repeated full forwards, no HF cache);
``bf16 3-way``     modelgen bf16 within ``THREE_WAY_FACTOR`` x transformers-bf16's own error against fp32
                   (+ ``THREE_WAY_ATOL``), ``modelgen.runtime.testing.accuracy``.

The tiny sizes are set under the spec's own key names too (:func:`size_aliases`: DBRX's ``d_model``), so a family
that spells them its own way is tiny as well. When transformers itself fails to build or run the tiny reference, the
one check is ``reference`` ("transformers' reference failed: ..."), not a modelgen failure.

A tiny value the spec refuses through ``requires:`` (Mixtral's ``sliding_window``) is left at transformers' default
and named in the report; a spec that refuses even that fails the ``config`` check.
"""
from __future__ import annotations

import copy
import importlib
import shutil
import sys
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Iterator

from modelgen.codegen.lower import compile_spec
from modelgen.codegen.render import render_package
from modelgen.codegen.spec_file import display_path

FP32_ATOL = 1e-4  # float32 end to end: only summation order differs (the hand-written parity tests' bound)
GREEDY_TOKENS = 16
THREE_WAY_FACTOR = 2.0
THREE_WAY_ATOL = 1e-2  # MoE routers: a near-tied expert choice may flip in bf16 (tests/test_parity_moe.py)


@dataclass
class Check:
    architecture: str
    target: str  # "-" for checks that do not depend on the target
    name: str
    passed: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.passed else 'FAIL'}  {self.architecture:<36} {self.target:<7} {self.name:<12} {self.detail}"


@dataclass
class VerifyReport:
    spec: str
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def format(self) -> str:
        lines = [f"modelgen verify {self.spec}:"] + [c.line() for c in self.checks]
        n_fail = len(self.failures())
        lines.append(f"{self.spec}: {len(self.checks) - n_fail}/{len(self.checks)} checks passed"
                     + ("" if self.passed else f"; {n_fail} failed"))
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------- rendered packages
@contextmanager
def rendered_modules(spec: str | Path, targets: tuple[str, ...]) -> Iterator[dict[str, ModuleType]]:
    """The spec rendered for each target into a temporary package and imported: ``{target: model package}``.

    The package name is unique per call, so a verify of an edited spec never sees the modules of an earlier render
    (or of generated/); the folder and the modules are removed on exit. Spec errors raise SpecError as in build."""
    ir = compile_spec(spec)
    root = Path(tempfile.mkdtemp(prefix="modelgen-verify-"))
    top = f"modelgen_verify_{uuid.uuid4().hex[:12]}"
    try:
        (root / top).mkdir()
        (root / top / "__init__.py").write_text("", encoding="utf-8")
        for target in targets:
            (root / top / target).mkdir()
            (root / top / target / "__init__.py").write_text("", encoding="utf-8")
            for rel, text in render_package(ir, target).items():
                path = root / top / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
        sys.path.insert(0, str(root))
        importlib.invalidate_caches()
        yield {t: importlib.import_module(f"{top}.{t}.{ir.name}") for t in targets}
    finally:
        if str(root) in sys.path:
            sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
            del sys.modules[name]
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------------------------------- tiny configs
def size_aliases(ir) -> dict[str, str]:
    """Config key -> tiny-table name for each size the spec reads under its own spelling (DBRX's ``d_model`` for
    ``hidden_size``, ``ffn_config.ffn_hidden_size`` for ``intermediate_size``): the spec field's name or one of its
    other keys names the size. Without these the tiny model keeps transformers' default sizes (a 2.3B "tiny" DBRX)."""
    from modelgen.runtime.testing.tiny_models import TINY_SIZES

    out: dict[str, str] = {}
    for value in ir.config_values:
        if value.kind != "read":
            continue
        size = next((k for k in (value.name, *value.keys) if k in TINY_SIZES), None)
        for key in value.keys if size else ():
            # text_config.*: the tiny table fills a wrapper's text config itself
            if key not in TINY_SIZES and not key.startswith("text_config."):
                out.setdefault(key, size)
    return out


def accepted_without(module: ModuleType, architecture: str,
                     aliases: dict[str, str] | None = None) -> tuple[tuple[str, ...], str | None]:
    """Which tiny feature values to leave at transformers' defaults so the spec's ``requires:`` accepts the config:
    (names left out, None) or (names, the refusal message) when nothing helps."""
    from modelgen.runtime.checkpoint_dir import flatten_text_config
    from modelgen.runtime.hf_config import ConfigError
    from modelgen.runtime.testing.tiny_models import CORE_SIZES, TINY_SIZES, tiny_config

    def refusal(without: tuple[str, ...]) -> str | None:
        cfg = flatten_text_config(tiny_config(architecture, without, aliases).to_dict())
        try:
            module.CONFIG_CLASS.from_hf_config(cfg)
        except ConfigError as e:
            return str(e)
        return None

    first = refusal(())
    if first is None:
        return (), None
    optional = tuple(k for k in TINY_SIZES if k not in CORE_SIZES)
    for key in optional:  # one feature the spec refuses (the usual case)
        if refusal((key,)) is None:
            return (key,), None
    return optional, refusal(optional) or None


def feature_names(ir) -> set[str]:
    """The config keys the spec reads (top level), plus ``"rope_scaling"`` when it reads a RoPE scaling table."""
    names: set[str] = set()
    for value in ir.config_values:
        if value.kind == "read":
            names |= {k.split(".", 1)[0] for k in value.keys}
            if value.reader == "read_rope_scaling" and {"rope_parameters", "rope_scaling"} & set(value.keys):
                names.add("rope_scaling")
    return names


def accepted_features(module: ModuleType, architecture: str, names: set[str], without: tuple[str, ...],
                      aliases: dict[str, str] | None) -> tuple[dict, list[str]]:
    """(the tiny feature overrides the spec's ``requires:`` accepts together, the ones it refuses)."""
    from modelgen.runtime.checkpoint_dir import flatten_text_config
    from modelgen.runtime.hf_config import ConfigError
    from modelgen.runtime.testing.tiny_models import tiny_config, tiny_features

    kept: dict = {}
    refused: list[str] = []
    for key, value in tiny_features(architecture, names, without, aliases).items():
        try:
            cfg = flatten_text_config(tiny_config(architecture, without, aliases, **kept, **{key: value}).to_dict())
        except Exception:  # noqa: BLE001 - transformers' validation: Phi-3 takes only a longrope rope_parameters
            refused.append(f"{key} (transformers refuses the tiny value)")
            continue
        try:
            module.CONFIG_CLASS.from_hf_config(cfg)
        except ConfigError:
            refused.append(key)  # a refusal by name is the spec's honest answer: named in the report
            continue
        kept[key] = value
    return kept, refused


# ------------------------------------------------------------------------------------------------------ the checks
def _layer_list(model) -> tuple[str, int] | None:
    """The decoder-layer list of a model (the ModuleList named ``...layers`` with the most entries): (name, length)."""
    import torch

    lists = [(n, len(m)) for n, m in model.named_modules()
             if isinstance(m, torch.nn.ModuleList) and n.split(".")[-1] == "layers"]
    return max(lists, key=lambda x: x[1]) if lists else None


def layer_divergence(llm, hf, prompt: list[int], atol: float = FP32_ATOL) -> str:
    """Per-layer max |ours - transformers| of the decoder layers' outputs (HF terms: hidden + residual), for a
    failed fp32 check: the first layer over ``atol`` is where to look. Empty when the layer lists do not pair up."""
    import torch

    from modelgen.runtime.debug import layer_output, tensor_capture

    ours, ref = _layer_list(llm.model), _layer_list(hf)
    if ours is None or ref is None or ours[1] != ref[1]:
        return ""
    names = [f"{ours[0]}.{i}" for i in range(ours[1])]
    ref_names = [f"{ref[0]}.{i}" for i in range(ref[1])]
    with tensor_capture(llm.model, names) as a:
        llm.score(prompt)
    with tensor_capture(hf, ref_names) as b, torch.no_grad():
        hf(torch.tensor([prompt]))
    diffs = []
    for mine, theirs in zip(names, ref_names):
        x = layer_output(a.one(mine)).float()[: len(prompt)]  # neuron: bucket padding rows after the prompt
        y = b.one(theirs)
        y = (y[0] if isinstance(y, (tuple, list)) else y).float()[0]
        diffs.append(float((x - y).abs().max()) if x.shape == y.shape else float("inf"))
    first = next((i for i, d in enumerate(diffs) if not d <= atol), None)
    table = ", ".join(f"{i}: {d:.2g}" for i, d in enumerate(diffs))
    where = f"first layer over {atol:g}: {first}" if first is not None else "every layer within bounds (the head?)"
    return f"; per layer max abs error [{table}]; {where}"


def _reference_failed(architecture: str, error: BaseException) -> Check:
    detail = "; ".join(line.strip() for line in f"{type(error).__name__}: {error}".splitlines() if line.strip())
    return Check(architecture, "-", "reference", False, f"transformers' reference failed: {detail[:1000]}")


def verify_architecture(modules: dict[str, ModuleType], architecture: str, workdir: Path,
                        bf16: bool = True, aliases: dict[str, str] | None = None,
                        features: set[str] | None = None) -> list[Check]:
    """Every check of one architecture on every target in ``modules`` (``aliases``: :func:`size_aliases`;
    ``features``: :func:`feature_names` -- check the tiny config with every optional feature the spec reads switched
    on instead; no checks when it reads none)."""
    import torch

    from modelgen.runtime.engine.llm import LLM
    from modelgen.runtime.engine.sampler import SamplingParams
    from modelgen.runtime.hf_config import ConfigError
    from modelgen.runtime.testing.accuracy import three_way_report
    from modelgen.runtime.testing.tiny_models import config_class, make_tiny_checkpoint, tiny_prompt

    checks: list[Check] = []
    try:
        config_class(architecture)
    except LookupError as e:
        return [Check(architecture, "-", "model", False, str(e))]
    any_module = next(iter(modules.values()))
    try:
        without, refused = accepted_without(any_module, architecture, aliases)
    except Exception as e:  # noqa: BLE001 - transformers' config class rejecting the tiny sizes
        return [_reference_failed(architecture, e)]
    if refused is not None:
        return [Check(architecture, "-", "config", False, f"the spec refuses a tiny {architecture}: {refused}")]
    overrides: dict = {}
    label, path, note = architecture, workdir / architecture, ""
    if features is not None:
        try:
            overrides, not_accepted = accepted_features(any_module, architecture, features, without, aliases)
        except Exception as e:  # noqa: BLE001 - transformers' config class rejecting a feature value
            return [_reference_failed(f"{architecture} +features", e)]
        if not overrides:
            return []
        label, path = f"{architecture} +features", workdir / f"{architecture}-features"
        note = (f" (on: {', '.join(sorted(overrides))}"
                + (f"; left off, refused: {', '.join(not_accepted)}" if not_accepted else "") + ")")
    try:
        hf = make_tiny_checkpoint(path, architecture, without=without, aliases=aliases, **overrides)
        vocab = hf.config.get_text_config().vocab_size
        prompt = tiny_prompt(vocab)
        with torch.no_grad():
            gold = hf(torch.tensor([prompt])).logits[0].float()
            ids, ref = list(prompt), []
            for _ in range(GREEDY_TOKENS):  # full forwards: the reference does not depend on HF's cache classes
                tok = int(hf(torch.tensor([ids])).logits[0, -1].argmax())
                ref.append(tok)
                ids.append(tok)
            floor = copy.deepcopy(hf).to(torch.bfloat16)(torch.tensor([prompt])).logits[0].float() if bf16 else None
    except Exception as e:  # noqa: BLE001 - the reference, not modelgen: said so, so nobody debugs the spec for it
        return [_reference_failed(label, e)]
    note += f" (left at transformers' default: {', '.join(without)})" if without else ""
    for target, module in modules.items():
        try:
            llm = LLM(path, target=target, dtype="float32", max_model_len=128, module=module, strict_config=True)
        except ConfigError as e:
            checks.append(Check(label, target, "config", False, str(e)))
            continue
        checks.append(Check(label, target, "config", True, f"every config.json key read or ignored{note}"))
        got = llm.score(prompt).float()
        err = (got - gold).abs().max().item() if got.shape == gold.shape else float("inf")
        detail = f"max abs error {err:.3g} (bound {FP32_ATOL:g}; {len(prompt)} positions)"
        if not err <= FP32_ATOL:
            detail += layer_divergence(llm, hf, prompt)
        checks.append(Check(label, target, "fp32 logits", err <= FP32_ATOL, detail))
        out = llm.generate_ids([prompt], SamplingParams(max_tokens=GREEDY_TOKENS, ignore_eos=True))[0]
        first = next((i for i, (a, b) in enumerate(zip(out, ref)) if a != b), None)
        checks.append(Check(label, target, "greedy", out == ref,
                            f"{GREEDY_TOKENS} tokens equal" if out == ref else
                            f"differ from token {first}: ours {out[first:first + 4]}, transformers {ref[first:first + 4]}"))
        del llm
        if floor is not None:
            ours = LLM(path, target=target, dtype="bfloat16", max_model_len=128, module=module,
                       strict_config=True).score(prompt).float()
            rep = three_way_report(gold, floor, ours, factor=THREE_WAY_FACTOR, atol=THREE_WAY_ATOL, name="bf16")
            checks.append(Check(label, target, "bf16 3-way", rep.passed,
                                f"max|ours-fp32| {rep.ours_max:.3g} <= bound {rep.bound:.3g} (= {THREE_WAY_FACTOR:g} x "
                                f"max|hf_bf16-fp32| {rep.floor_max:.3g} + {THREE_WAY_ATOL:g}); argmax agreement "
                                f"{100 * rep.argmax_ours:.0f}%" if rep.passed else rep.summary()))
    return checks


def verify_spec(spec: str | Path, targets: tuple[str, ...], bf16: bool = True,
                architectures: tuple[str, ...] | None = None, debug: bool = False,
                features: bool = True) -> VerifyReport:
    """Render ``spec`` for ``targets`` and run every check for each of its architectures (or ``architectures``);
    ``debug``: an exception out of the generated code propagates instead of becoming a failed check; ``features``:
    also check a second tiny config with every optional feature the spec reads switched on (fp32 and greedy: the
    bf16 check measures precision, which the features do not change)."""
    ir = compile_spec(spec)
    report = VerifyReport(display_path(Path(spec)))
    passes = [(bf16, None)] + ([(False, feature_names(ir))] if features else [])
    with rendered_modules(spec, targets) as modules, tempfile.TemporaryDirectory(prefix="modelgen-tiny-") as tmp:
        for arch in architectures or ir.architectures:
            for pass_bf16, names in passes:
                try:
                    report.checks += verify_architecture(modules, arch, Path(tmp), bf16=pass_bf16,
                                                         aliases=size_aliases(ir), features=names)
                except Exception as e:  # a crash in the generated code is a failed check, not a verify traceback
                    if debug:
                        raise
                    # a multi-line loader report (missing / unexpected tensors) kept whole, on one line
                    detail = "; ".join(line.strip() for line in f"{type(e).__name__}: {e}".splitlines()
                                       if line.strip())
                    label = arch if names is None else f"{arch} +features"
                    report.checks.append(Check(label, "-", "run", False, detail[:1000]))
    return report
