"""Chat templates are untrusted: the bounded sandbox refuses size and time bombs fast with a one-line error naming
the template's file, and real templates (SmolLM2's, Qwen-style with loops over messages) render exactly as in a
plain Jinja2 sandbox."""
from __future__ import annotations

import time

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from modelgen.runtime.tokenizer import ChatTemplateError, Tokenizer

SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' "
    "+ message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt "
    "%}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Qwen2.5-style: tools, tool calls with tojson, loop.index0 look-behind / look-ahead over messages.
QWEN25 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- else %}{{- 'You are Qwen.' }}{%- endif %}
    {{- "\\n\\n# Tools\\n<tools>" }}
    {%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"""

# Qwen3-style: namespace state, reversed messages, string methods (split/lstrip/startswith), ~ concatenation.
QWEN3 = """{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not message.content.startswith('<tool_response>') %}
        {%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content %}
    {%- if message.role == "assistant" and '</think>' in content %}
        {%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
        {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- if loop.index0 > ns.last_query_index %}
            {{- '<|im_start|>assistant\\n<think>\\n' ~ reasoning.strip('\\n') ~ '\\n</think>\\n\\n' ~ content }}
        {%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"""

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4",
     "tool_calls": [{"function": {"name": "calc", "arguments": {"expr": "2+2", "quote": "\"'\\"}}}]},
    {"role": "tool", "content": "4"},
    {"role": "tool", "content": "four"},
    {"role": "user", "content": "And 3+3? " + "long " * 2000},
]


def _tokenizer(template: str, source: str = "/ckpt/tokenizer_config.json") -> Tokenizer:
    return Tokenizer(None, {"bos_token": "<s>", "eos_token": {"content": "</s>"}}, template, source)


def _reference(template: str, messages, **extra) -> str:
    """What transformers renders (its sandbox, tojson and extensions): the text the model was trained on."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _compile_jinja_template(template).render(messages=messages, add_generation_prompt=True, bos_token="<s>",
                                                    eos_token="</s>", **extra)


@pytest.mark.parametrize("template", [SMOLLM2, QWEN25, QWEN3], ids=["smollm2", "qwen2.5", "qwen3"])
@pytest.mark.parametrize("messages", [CONVERSATION[1:2], CONVERSATION, CONVERSATION * 40], ids=["one", "all", "x40"])
def test_real_templates_render_as_transformers(template, messages):
    tok = _tokenizer(template)
    got = tok.apply_chat_template(messages)
    assert got == _reference(template, messages)
    assert got.endswith("<|im_start|>assistant\n")
    plain = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(template)
    if template is not QWEN25:  # Qwen2.5 uses tojson, which plain Jinja2 HTML-escapes (transformers does not)
        assert got == plain.render(messages=messages, add_generation_prompt=True, bos_token="<s>", eos_token="</s>")


COMPAT = {
    "loop controls": "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}{% if m.role == 'system' %}"
                     "{% continue %}{% endif %}[{{ m.role }}]{% endfor %}",
    "generation tag": "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
                      "{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}",
    "tojson like transformers": "{{ messages[2].tool_calls | tojson }}|{{ {'k': 'é<&>'} | tojson(indent=2) }}|"
                                "{{ {'b': 1, 'a': 2} | tojson(sort_keys=true, separators=(',', ':')) }}",
    "recursive loop": "{% for m in messages recursive %}{{ m.role }}{% if m.tool_calls %}({{ loop(m.tool_calls) }})"
                      "{% endif %}{% endfor %}",
    "loop filter and else": "{% for m in messages if m.role == 'nobody' %}x{% else %}none{% endfor %}"
                            "{% for m in messages if m.role == 'tool' %}{{ loop.index }}/{{ loop.length }} {% endfor %}",
    "namespace and ~": "{% set ns = namespace(t='') %}{% for m in messages %}{% set ns.t = ns.t ~ m.role[0] %}"
                       "{% endfor %}{{ ns.t }}",
    "reversed slice": "{% for m in messages[::-1] %}{{ loop.revindex0 }}{% endfor %}",
}


@pytest.mark.parametrize("name", list(COMPAT))
def test_template_features_render_as_transformers(name):
    template = COMPAT[name]
    assert _tokenizer(template).apply_chat_template(CONVERSATION) == _reference(template, CONVERSATION)


def test_large_numbers_that_are_not_sizes_render():
    """Integers are only limited where they act as sizes (widths, counts, repetition), not as values."""
    template = ("{{ '%d' % 1700000000 }} {{ '%d'|format(1700000000) }} {{ '{}'.format(10**30) }} "
                "{{ namespace(t=1700000000).t }} {{ 1700000000 * 3 }} {{ [1, 2, 3]|batch(2, 0)|list }}")
    assert _tokenizer(template).apply_chat_template([]) == _reference(template, [])


def test_strftime_now():
    import datetime

    got = _tokenizer("{{ strftime_now('%Y') }}").apply_chat_template([])
    assert got == str(datetime.datetime.now().year)
    with pytest.raises(ChatTemplateError, match="strftime_now"):
        _tokenizer("{{ strftime_now('%c' * 2000) }}").apply_chat_template([])


BOMBS = {
    "string repetition": ("{{ 'x'*100000*100000 }}", r"the '\*' operator would produce about 10000000000 characters"),
    "nested range loops": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", r"render time limit"),
    "nested loops with output": (
        "{% for i in range(100000) %}{% for j in range(100000) %}ab{% endfor %}{% endfor %}", r"render (time|size) limit"),
    "loop over a long string": (
        "{% set s = 'x'*90000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}", r"render time limit"),
    "recursive macro": ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", r"recursed too deeply"),
    "macro buffer": ("{% macro m() %}{% for i in range(100000) %}{% for j in range(1000) %}xxxxxxxxxxxxxxxx"
                     "{% endfor %}{% endfor %}{% endmacro %}{{ m()|length }}", r"render (time|size) limit"),
    "doubling with ~": ("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
                        "{% endfor %}", r"the '~' operator would produce"),
    "doubling a list": ("{% set ns = namespace(l=['a']) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}"
                        "{% endfor %}", r"the '\+' operator would produce"),
    "list repetition": ("{{ (['x'*1000000]*100000)|length }}", r"the '\*' operator would produce"),
    "join": ("{% set s = 'x'*1000000 %}{{ ([s]*10)|join }}", r"filter 'join' would produce"),
    "str.join": ("{% set s = 'x'*1000000 %}{{ ''.join([s]*10) }}", r"str.join\(\) would produce"),
    "center filter": ("{{ 'x'|center(10000000000) }}", r"filter 'center' would produce about 10000000000 characters"),
    "ljust method": ("{{ 'x'.ljust(10000000000) }}", r"str.ljust\(\) would produce about 10000000000 characters"),
    "translate": ("{{ ('x'*100000).translate({120: 'y'*100000}) }}", r"str.translate\(\) would produce"),
    "batch fill": ("{{ [1]|batch(1000000000, 'x')|list|length }}", r"filter 'batch' would produce"),
    "replace": ("{% set s = 'x'*1000000 %}{{ s|replace('x', s) }}", r"filter 'replace' would produce"),
    "str.replace": ("{% set s = 'x'*1000000 %}{{ s.replace('', s) }}", r"str.replace\(\) would produce"),
    "expandtabs": ("{{ ('\t'*1000000).expandtabs(1000) }}", r"str.expandtabs\(\) would produce"),
    "%-format width": ("{{ '%1000000000s' % 'x' }}", r"width 1000000000 in the format string"),
    "%-format star": ("{{ '%*s' % (1000000000, 'x') }}", r"numeric argument 1000000000"),
    "str.format width": ("{{ '{:>1000000000}'.format('x') }}", r"width 1000000000 in the format string"),
    "str.format nested width": ("{{ '{0:{1}}'.format('x', 1000000000) }}", r"numeric argument 1000000000"),
    "format fields": ("{% set s = 'x'*1000000 %}{{ ('{0}'*10000).format(s) }}", r"str.format\(\) would produce"),
    "power": ("{{ 10**100000 }}", r"10 \*\* 100000 has over 65536 bits"),
    "int squaring": ("{% set ns = namespace(x=3) %}{% for i in range(100) %}{% set ns.x = ns.x * ns.x %}"
                     "{% endfor %}", r"integer result over 65536 bits"),
    "map center": ("{{ range(100000)|map('string')|map('center', 1000000)|list|length }}", r"render size limit"),
    "indent": ("{{ ('\n'*1000000)|indent(1000) }}", r"filter 'indent' would produce"),
    "wordwrap": ("{{ ('a '*100000)|wordwrap(1, wrapstring='x'*10000) }}", r"filter 'wordwrap' would produce"),
    "lipsum": ("{{ lipsum(1000000) }}", r"undefined value: 'lipsum' is undefined"),
    "tojson indent": ("{{ (range(1000)|list) | tojson(indent=100000) }}", r"filter 'tojson' would produce"),
}


@pytest.mark.parametrize("name", list(BOMBS))
def test_bombs_fail_fast_with_one_line_naming_the_file(name):
    template, pattern = BOMBS[name]
    tok = _tokenizer(template)
    t0 = time.perf_counter()
    with pytest.raises(ChatTemplateError, match=pattern) as info:
        tok.apply_chat_template([{"role": "user", "content": "hi"}])
    elapsed = time.perf_counter() - t0
    message = str(info.value)
    assert elapsed < 2.0, f"{name}: took {elapsed:.2f}s"
    assert message.startswith("/ckpt/tokenizer_config.json: chat template ")
    assert "\n" not in message


@pytest.mark.parametrize(
    "template, pattern",
    [
        ("{% for %}", r"chat template syntax error: line 1: Expected an expression"),
        ("{{ foo.bar }}", r"chat template uses an undefined value: 'foo' is undefined"),
        ("{{ ''.__class__.__mro__ }}", r"chat template attempted an unsafe operation: access to attribute '__class__'"),
        ("{{ messages.append(1) }}", r"chat template attempted an unsafe operation"),
        ("{{ raise_exception('Conversation roles must alternate\nuser/assistant') }}",
         r"chat template raised an error: Conversation roles must alternate user/assistant"),
        ("{{ 1/0 }}", r"chat template failed: ZeroDivisionError: division by zero"),
        ("{{ range(200000)|list }}", r"chat template failed: OverflowError: Range too big"),
        ("{{ range(10**9)|list }}", r"chat template failed: OverflowError: Range too big"),
        ("", r"the checkpoint has no chat_template"),
    ],
)
def test_template_errors_are_one_line_and_name_the_file(template, pattern):
    tok = _tokenizer(template, "/ckpt/chat_template.jinja")
    with pytest.raises(ChatTemplateError, match=pattern) as info:
        tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert str(info.value).startswith("/ckpt/chat_template.jinja: ")
    assert "\n" not in str(info.value)


def test_limits_reset_between_renders():
    """The size budget and the clock are per render: many renders of a real template all succeed."""
    tok = _tokenizer(SMOLLM2)
    for _ in range(200):
        tok.apply_chat_template([{"role": "user", "content": "x" * 100_000}])


def test_time_limit_is_a_parameter():
    tok = _tokenizer("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
    t0 = time.perf_counter()
    with pytest.raises(ChatTemplateError, match="0.2 s render time limit"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}], time_limit=0.2)
    assert time.perf_counter() - t0 < 1.0


def test_chat_template_jinja_file_takes_precedence(tmp_path):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.models import WordLevel

    HFTokenizer(WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")).save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text('{"chat_template": "from config"}')
    assert Tokenizer.from_checkpoint(tmp_path).apply_chat_template([]) == "from config"
    (tmp_path / "chat_template.jinja").write_text("from jinja {{ messages|length }}")
    tok = Tokenizer.from_checkpoint(tmp_path)
    assert tok.apply_chat_template([{"role": "user", "content": "a"}]) == "from jinja 1"
    assert tok.template_source == str(tmp_path / "chat_template.jinja")
