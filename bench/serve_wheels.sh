#!/usr/bin/env bash
# The wheels `modelgen serve` and bench/serve.py's openai client need on a machine without network and without them
# (the H200 device has torch, transformers, tokenizers, httpx, anyio, h11, tqdm): the full dependency closure of the
# packages below, for CPython 3.11, 3.12 and 3.13 on x86-64 Linux (manylinux 2.17 or 2.28: torch's own wheels
# need glibc 2.28 already), into .whl/serve/ (git-ignored; the device run carries it), with one pinned
# requirements-cpXY.txt per Python so the device installs exactly its own wheels:
#
#   bash bench/serve_wheels.sh                     # here, with network to the package index
#   PYV=$(python3 -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
#   python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
#       --find-links .whl/serve -r .whl/serve/requirements-$PYV.txt      # on the device
#   PYTHONPATH=$PWD:/tmp/site python3 bench/serve.py --shape llama3-8b --device cuda ...
#
# Packages: fastapi + uvicorn (runtime/server), pydantic, ruamel.yaml, jinja2, libcst (codegen: `modelgen serve` checks
# that generated/ is fresh before serving, which compiles the spec), openai (the bench's client). Their dependencies
# (starlette, pydantic_core, annotated_types, typing_inspection, typing_extensions, anyio, sniffio, idna, h11, click,
# jiter, httpx2, httpcore2, truststore, opentelemetry-api, annotated_doc, markupsafe, pyyaml) come along: newer than or
# equal to what the device may have, and /tmp/site only adds to its site-packages.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.whl/serve
rm -rf "$dest"
mkdir -p "$dest"
pkgs=(fastapi uvicorn openai pydantic ruamel.yaml jinja2 libcst)
for v in 311 312 313; do
  python3 -m pip download -q --only-binary=:all: --implementation cp --python-version "${v:0:1}.${v:1}" \
    --abi "cp$v" --abi abi3 --abi none --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d "$dest/cp$v" "${pkgs[@]}" 2>&1 | grep -v "is ignored: it is neither" || true
  # name==version of each wheel pip chose for this Python (the file name's first two fields)
  for w in "$dest/cp$v"/*.whl; do
    b=$(basename "$w"); echo "${b%%-*}==$(echo "$b" | cut -d- -f2)"
  done | sort > "$dest/requirements-cp$v.txt"
  mv -f "$dest/cp$v"/*.whl "$dest/"
  rmdir "$dest/cp$v"
  [ -s "$dest/requirements-cp$v.txt" ] || { echo "no wheels for cp$v" >&2; exit 1; }
done
ls "$dest"/*.whl | wc -l
du -sh "$dest"
