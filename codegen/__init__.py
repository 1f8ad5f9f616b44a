"""modelgen's compiler: YAML spec -> validated IR -> target-specific Python modules.

Pipeline (one module per stage):
  yaml_source.py  load YAML with line/column positions (ruamel.yaml)
  schema.py       pydantic models of the spec language (strict)
  expr.py         the safe expression language used by derived config values
  lower.py        spec -> IR (resolved, checked against the config binding)
  render.py       IR -> Jinja2 templates -> libcst check -> file contents
  build.py        write / check generated/ atomically and deterministically
(the `modelgen` command, above both this compiler and the runtime, is the cli/ package: modelgen.cli)
"""

GENERATOR_VERSION = "0.1.0"
