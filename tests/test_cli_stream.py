"""``modelgen run`` as a user sees it: chat template by default (``--raw`` off), token-by-token streaming (one
write per token, the same text as ``--no-stream``), defaults in ``--help``, progress bars on a terminal only and
never under ``--json``. In-process (``cli.main``) with captured streams; the tiny checkpoint of test_python_api."""
from __future__ import annotations

import contextlib
import io
import json

import pytest

from modelgen import LLM, SamplingParams
from modelgen.cli import main
from tests.test_python_api import make_api_checkpoint


@pytest.fixture(scope="module")
def ckpt(llama_checkpoint, tmp_path_factory):
    return make_api_checkpoint(llama_checkpoint, tmp_path_factory)  # tiny Llama + a word tokenizer of all 160 ids


class _Recorder(io.StringIO):
    """A stream that records each write (to count streamed pieces) and can pretend to be a terminal."""

    def __init__(self, tty: bool = False):
        super().__init__()
        self.writes: list[str] = []
        self.tty = tty

    def write(self, s: str) -> int:
        self.writes.append(s)
        return super().write(s)

    def isatty(self) -> bool:
        return self.tty


def _run(*args: str, tty_stderr: bool = False) -> tuple[int, _Recorder, _Recorder]:
    out, err = _Recorder(), _Recorder(tty_stderr)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["run", "--device", "cpu", *args])  # pinned: LLM(ckpt)'s default; `auto` would pick a GPU
    return rc, out, err


def _ids(ckpt, *args):
    rc, out, err = _run("--checkpoint", str(ckpt), *args, "--max-new-tokens", "5", "--ignore-eos", "--json")
    assert rc == 0, err.getvalue()
    return json.loads(out.getvalue())["outputs"][0]["token_ids"]


def test_chat_template_by_default(ckpt):
    llm = LLM(ckpt, progress=False)
    tok = llm.tokenizer
    params = SamplingParams(max_new_tokens=5, ignore_eos=True)
    chat_ids, raw_ids = tok.encode_chat("hello world"), tok.encode("hello world")
    assert chat_ids != raw_ids
    want_chat, want_raw = llm.generate([chat_ids, raw_ids], params)
    assert _ids(ckpt, "--prompt", "hello world") == want_chat
    assert _ids(ckpt, "--prompt", "hello world", "--chat") == want_chat
    assert _ids(ckpt, "--prompt", "hello world", "--raw") == want_raw
    with pytest.raises(SystemExit):  # argparse: not allowed together
        _run("--checkpoint", str(ckpt), "--prompt", "x", "--chat", "--raw")


def test_streams_token_by_token(ckpt):
    common = ("--checkpoint", str(ckpt), "--prompt", "hello world", "--max-new-tokens", "6", "--ignore-eos")
    rc, streamed, _ = _run(*common)
    assert rc == 0
    rc, batch, _ = _run(*common, "--no-stream")
    assert rc == 0
    assert streamed.getvalue() == batch.getvalue() and streamed.getvalue().strip()
    pieces = [w for w in streamed.writes if w]
    assert len(pieces) >= 6  # one write per generated token (+ the final newline)
    assert len([w for w in batch.writes if w.strip()]) == 1


def test_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "tokens to generate per prompt at most (default: 32)" in text
    assert "generated target to run (default: rocm)" in text
    assert "--raw" in text and "--no-stream" in text


def test_progress_on_a_terminal_only_and_never_with_json(ckpt):
    common = ("--checkpoint", str(ckpt), "--prompt", "hello", "--max-new-tokens", "2")
    rc, _, err = _run(*common, tty_stderr=True)
    assert rc == 0 and "loading weights" in err.getvalue()
    rc, out, err = _run(*common, "--json", tty_stderr=True)
    assert rc == 0 and "loading weights" not in err.getvalue()
    json.loads(out.getvalue())  # stdout stays exactly one JSON object
    rc, _, err = _run(*common)  # stderr not a terminal: no bar
    assert rc == 0 and "loading weights" not in err.getvalue()


def test_streamed_ids_without_tokenizer_match_batch(ckpt, tmp_path):
    """A checkpoint without tokenizer.json streams token ids, printed as --no-stream prints them."""
    import shutil

    d = tmp_path / "notok"
    shutil.copytree(ckpt, d)
    (d / "tokenizer.json").unlink()
    common = ("--checkpoint", str(d), "--prompt-ids", "5,6,7", "--max-new-tokens", "4", "--ignore-eos")
    rc, streamed, _ = _run(*common)
    assert rc == 0
    rc, batch, _ = _run(*common, "--no-stream")
    assert rc == 0 and streamed.getvalue() == batch.getvalue()
    assert len(streamed.getvalue().split()) == 4
