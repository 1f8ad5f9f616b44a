"""The compiler's commands: build, check, list, schema, new (draft a spec), verify and coverage."""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from modelgen.codegen import errors
from modelgen.targets import ENGINE_TARGETS, TARGETS  # ENGINE_TARGETS: those modelgen's own engine runs (not vllm)


def _targets(value: str) -> tuple[str, ...]:
    return TARGETS if value == "all" else (value,)


def _engine_targets(value: str) -> tuple[str, ...]:
    """Targets modelgen's engine runs (``verify`` runs the generated code itself; the vllm target's parity is tested
    inside real vLLM: tests/vllm/)."""
    return ENGINE_TARGETS if value == "all" else (value,)


def cmd_build(args: argparse.Namespace) -> int:
    from modelgen.codegen.build import BrokenSpecs, all_specs, build
    from modelgen.codegen.spec_file import display_path

    specs = all_specs() if args.all else [Path(s) for s in args.specs]
    if not specs:
        print("modelgen build: give SPEC files or --all", file=sys.stderr)
        return 2
    broken = {}
    try:  # a broken spec is reported; the others are still built (its own files are left as they were)
        written = build(specs, _targets(args.target), keep_going=True)
    except BrokenSpecs as e:
        written, broken = e.written, e.broken
    for path in written:
        print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    print(f"{len(specs)} spec(s) x {len(_targets(args.target))} target(s): {len(written)} file(s) changed")
    for spec, err in broken.items():
        print(err, file=sys.stderr)
    asked = {s.resolve() for s in specs}
    if broken and (len(specs) > 1 or {s.resolve() for s in broken} != asked):  # one spec: its error says it all
        names = ", ".join(display_path(s) for s in broken)
        print(f"modelgen build: {len(broken)} spec(s) do not build and were not written: {names} (the target "
              f"indexes keep their entries as they were; the other specs were built and indexed)", file=sys.stderr)
    return 1 if broken else 0


def cmd_check(args: argparse.Namespace) -> int:
    from modelgen.codegen.build import check

    diffs = check()
    if not diffs:
        print("generated/ is up to date with specs/ and templates/")
        return 0
    broken = [d.split(":", 2)[1].strip() for d in diffs if d.startswith("broken: ")]
    for d in diffs:
        print(d)
    stale = len(diffs) - len(broken)
    if broken:
        print(f"modelgen check: {len(broken)} spec(s) do not build: {', '.join(broken)}", file=sys.stderr)
    if stale:
        print(f"modelgen check: {stale} generated file(s) out of date; run `modelgen build --all`", file=sys.stderr)
    return 1


def cmd_list(args: argparse.Namespace) -> int:
    from modelgen.codegen.build import all_specs, summaries
    from modelgen.codegen.spec_file import display_path

    rows = []
    broken = {}
    for spec in all_specs():
        try:
            ir = summaries([spec])[0]  # the compile cache's summary, or a compile
        except errors.ModelgenError as e:  # listed as broken; the other specs are still listed
            broken[display_path(spec)] = str(e)
            rows.append((display_path(spec), "(does not build: see `modelgen check`)", ""))
            continue
        rows.append((display_path(spec), ", ".join(ir.architectures), ", ".join(TARGETS)))
    for spec, err in broken.items():
        print(f"modelgen list: {spec} does not build: {err.splitlines()[0]}", file=sys.stderr)
    if args.json:
        print(json.dumps([{"spec": s, "architectures": a.split(", ") if s not in broken else [],
                           "targets": list(TARGETS) if s not in broken else [],
                           **({"error": broken[s]} if s in broken else {})} for s, a, _ in rows]))
        return 0
    width = max([len(r[0]) for r in rows] + [4])
    awidth = max([len(r[1]) for r in rows] + [13])
    print(f"{'SPEC':<{width}}  {'ARCHITECTURES':<{awidth}}  TARGETS")
    for s, a, t in rows:
        print(f"{s:<{width}}  {a:<{awidth}}  {t}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from modelgen.codegen.schema import Spec

    print(json.dumps(Spec.model_json_schema(), indent=2, sort_keys=True))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    import logging

    from .verify import verify_spec

    logging.getLogger("modelgen.loader").setLevel(logging.WARNING)
    status = 0
    for spec in args.specs:
        report = verify_spec(Path(spec), _engine_targets(args.target), bf16=not args.no_bf16, debug=args.verbose)
        print(report.format())
        if not report.passed:
            status = 1
    return status


def cmd_coverage(args: argparse.Namespace) -> int:
    from .coverage import checkpoint_coverage

    if args.tp < 1:
        print(f"modelgen coverage: --tp {args.tp}: expected a positive integer", file=sys.stderr)
        return 2
    if args.ep is not None and (args.ep < 1 or args.tp % args.ep):
        print(f"modelgen coverage: --ep {args.ep}: expected a divisor of --tp {args.tp} (expert-parallel groups of "
              f"tp / ep ranks)", file=sys.stderr)
        return 2
    with _rendered_or_built(Path(args.spec), args.target) as module:
        report = checkpoint_coverage(module, args.checkpoint, args.target, tp=args.tp, spec_path=Path(args.spec),
                                     allow_external_shards=args.allow_external_shards, ep=args.ep)
    print(report.format(parameters=not args.summary))
    return 0 if report.passed else 1


@contextlib.contextmanager
def _rendered_or_built(spec: Path, target: str):
    """The model package of ``spec`` as the spec is now: rendered into a temporary package (the spec need not be
    built, and an edited one is seen as edited)."""
    from .verify import rendered_modules

    with rendered_modules(spec, (target,)) as modules:
        yield modules[target]


def cmd_new(args: argparse.Namespace) -> int:
    from .draft import draft_spec

    out = Path(args.output) if args.output else None
    if out is not None and out.exists() and not args.force:
        print(f"modelgen new: {out} exists; choose another -o or pass --force", file=sys.stderr)
        return 2
    draft = draft_spec(Path(args.from_hf), base=Path(args.base) if args.base else None,
                       exclude=tuple(args.exclude))
    if out is None:
        sys.stdout.write(draft.text)
    else:
        out.write_text(draft.text, encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)
    print(f"modelgen new: extends {draft.base.spec.name}; {draft.todos} TODO(s) to review", file=sys.stderr)
    return 0
