"""The request as sent (``engine.wire``, issue 21 §3): what the one builder puts in the request, and that each
copied form holds exactly that request. (That a real ``vllm serve`` builds the engine's prompt from each form is
tests/real_engine/test_request_as_sent_real.py's.)"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

from dots3_demo.budget import VideoSettings
from dots3_demo.engine import TurnRequest, wire
from dots3_demo.engine.protocol import DEFAULT_BASE_URL, SamplingSettings
from dots3_demo.tools import EXAMPLE_TOOLS, parse_tools_json
from dots3_demo.tools.forcing import tool_call_regex

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "examples"
IMAGE, VIDEO = ASSETS / "shapes.png", ASSETS / "room_clip.mp4"


def _turn(**changes) -> TurnRequest:
    content = [{"type": "image_url", "image_url": {"url": str(IMAGE)}},
               {"type": "video_url", "video_url": {"url": IMAGE.parent.as_uri() + "/room_clip.mp4"}},
               {"type": "text", "text": "What's in ```both```? Say 'it'."}]
    values = dict(session_id="s", messages=[{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": content}],
                  tools=parse_tools_json(json.dumps(EXAMPLE_TOOLS)), video=VideoSettings(seq=8192),
                  sampling=SamplingSettings(max_tokens=64, temperature=0.0, top_k=5, seed=3), tool_choice="required")
    return TurnRequest(**{**values, **changes})


def test_the_request_holds_the_turn_with_local_media_as_file_urls_and_their_sizes():
    turn = _turn()
    request = wire.chat_request(turn, "/models/tiny")
    body = request.body()
    assert body["model"] == "/models/tiny" and body["messages"][0] == {"role": "system", "content": "Be brief."}
    urls = [part[part["type"]]["url"] for part in body["messages"][1]["content"][:2]]
    assert urls == [IMAGE.as_uri(), VIDEO.as_uri()]
    assert [(m.kind, m.url, m.size) for m in request.media] == [
        ("image", IMAGE.as_uri(), IMAGE.stat().st_size), ("video", VIDEO.as_uri(), VIDEO.stat().st_size)]
    assert (body["temperature"], body["max_tokens"], body["seed"], body["top_k"]) == (0.0, 64, 3, 5)
    assert body["tools"] == turn.tools and body["tool_choice"] == "auto"
    assert body["structured_outputs"] == {"regex": tool_call_regex(turn.tools)}  # "required", forced
    assert body["mm_processor_kwargs"] == turn.mm_processor_kwargs()  # the video budget
    assert body["return_token_ids"] is True and body["return_prompt_text"] is True and "stream" not in body
    assert request.endpoint is None and request.base_url == DEFAULT_BASE_URL


def test_the_video_budget_goes_only_with_a_video_and_only_while_the_server_takes_it():
    text_only = _turn(messages=[{"role": "user", "content": "hi"}], tools=[], tool_choice="auto")
    body = wire.chat_request(text_only, "m").body()
    assert "mm_processor_kwargs" not in body and "tools" not in body and "structured_outputs" not in body
    assert "mm_processor_kwargs" not in wire.chat_request(_turn(), "m", mm_kwargs=False).body()


def test_data_and_http_urls_stay_as_they_are():
    content = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
               {"type": "audio_url", "audio_url": {"url": "https://example.org/a.wav"}}]
    request = wire.chat_request(_turn(messages=[{"role": "user", "content": content}]), "m")
    assert request.body()["messages"][0]["content"] == content
    assert [(m.kind, m.size) for m in request.media] == [("image", None), ("audio", None)]


def test_the_remote_adapter_streams_the_same_request_with_its_media_inlined():
    request = wire.chat_request(_turn(), "m", endpoint="http://h:1/v1")
    inlined = [{"role": "user", "content": "inlined"}]
    kwargs = request.openai_kwargs(inlined, stream=True)
    assert kwargs.pop("messages") == inlined and kwargs.pop("extra_body") == request.extra
    assert kwargs.pop("stream") is True and kwargs.pop("stream_options")["include_usage"] is True
    assert kwargs == {"model": "m", **request.params}


def test_the_curl_form_sends_the_json_form_untouched():
    request = wire.chat_request(_turn(), "/models/tiny")
    curl = wire.as_curl(request)
    document = curl.split("<<'REQUEST_JSON'\n", 1)[1].rsplit("\nREQUEST_JSON", 1)[0]
    assert document == wire.as_json(request) and json.loads(document) == request.body()
    assert f"{DEFAULT_BASE_URL}/chat/completions" in curl and "vllm serve /models/tiny" in curl
    assert "--allowed-local-media-path" in curl  # the file:// media need it
    assert subprocess.run(["bash", "-n"], input=curl, text=True).returncode == 0  # it parses as shell


def test_the_python_form_holds_the_same_request_and_inlines_local_media():
    request = wire.chat_request(_turn(), "/models/tiny", endpoint="http://h:1/v1")
    script = wire.as_python(request)
    tree = ast.parse(script)
    messages = next(n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "messages")
    assert ast.literal_eval(messages) == request.messages
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "create")
    given = {k.arg: k.value for k in call.keywords}
    assert ast.literal_eval(given.pop("extra_body")) == request.extra
    assert ast.literal_eval(given.pop("model")) == "/models/tiny" and isinstance(given.pop("messages"), ast.Name)
    assert {k: ast.literal_eval(v) for k, v in given.items()} == request.params
    assert "base_url='http://h:1/v1'" in script
    namespace: dict = {}  # the script's own inline(): a file:// URL becomes the file's bytes as a data: URL
    helper = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "inline")
    exec(compile(ast.Module([*(n for n in tree.body if isinstance(n, ast.Import)), helper], []), "copy", "exec"),
         namespace)
    import base64

    assert namespace["inline"](IMAGE.as_uri()) == "data:image/png;base64," + base64.b64encode(
        IMAGE.read_bytes()).decode()


def test_a_fence_outlasts_any_backticks_inside():
    block = wire.fence("a ```` b", "json")
    assert block.startswith("`````json\n") and block.endswith("\n`````")
    assert re.fullmatch(r"```python\nx\n```", wire.fence("x", "python"))


def test_an_in_memory_image_is_named_not_fatal():
    """The in-process engine takes ``image_pil`` parts (a PIL image, no file): building the request must not fail
    the turn; the copy names what it cannot hold."""
    from PIL import Image

    turn = _turn(messages=[{"role": "user", "content": [{"type": "image_pil", "image_pil": Image.new("RGB", (4, 4))},
                                                        {"type": "text", "text": "hi"}]}])
    part = wire.chat_request(turn, "m").body()["messages"][0]["content"][0]
    assert part == {"type": "image_pil", "image_pil": "<Image in memory: not copyable>"}


def test_a_choice_in_the_sampling_is_forced_by_structured_outputs_in_process_and_on_the_wire():
    from dots3_demo.engine.inprocess import build_sampling_params
    from dots3_demo.engine.protocol import StructuredOutputs

    choice = SamplingSettings(max_tokens=4, temperature=0.0, structured_outputs=StructuredOutputs(("A", "B", "C")))
    turn = _turn(tools=[], tool_choice="auto", sampling=choice)
    assert wire.chat_request(turn, "m").body()["structured_outputs"] == {"choice": ["A", "B", "C"]}
    params = build_sampling_params(turn)  # vLLM's own SamplingParams
    assert params.structured_outputs.choice == ["A", "B", "C"] and params.max_tokens == 4
    free = _turn(tools=[], tool_choice="auto", sampling=SamplingSettings())
    assert "structured_outputs" not in wire.chat_request(free, "m").body()
    assert build_sampling_params(free).structured_outputs is None
