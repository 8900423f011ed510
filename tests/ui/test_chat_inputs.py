"""The chat's streaming events take their inputs as sent, without Gradio's per-input preprocessing (which handed
each input to a worker thread in turn, behind every reply's streamed steps: ``chat_page.setup_chat_events``).

The live app over the scripted engine and a Gradio client as an API caller: values no Gradio preprocessing
shaped reach the request vLLM gets read as the page's components would read them."""

from __future__ import annotations

import pytest

from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.browser.conftest import serving
from tests.real_engine.test_chat_real_engine import chat_controls

STREAMING = ("chat", "chat_submit", "regenerate", "regenerate_from", "tool_result", "run_example_tool")


@pytest.fixture(scope="module")
def live(profile):
    double = ScriptedAsyncLLM(["fine"])
    with serving(profile, scripted_engine(double)) as demo:
        yield demo, double


def test_the_streaming_chat_events_skip_gradios_preprocessing(live):
    demo, _ = live
    by_name = {fn.api_name: fn for fn in demo.fns.values()}
    assert all(by_name[name].preprocess is False for name in STREAMING)
    assert by_name["clear_chat"].preprocess is True  # the others as Gradio has them


def test_values_as_sent_reach_vllm_as_the_components_would_read_them(live):
    """A number sent as text or as a float, an emptied number box, a message that is not text: the request
    carries what the page's Number, Slider and Textbox would have made of them; a control that is not a
    number, or a slider's value past its ends, refuses the turn, naming the control."""
    from gradio_client import Client

    demo, double = live
    client = Client(demo.local_url, verbose=False, download_files=False)
    sent = len(double.generated)
    client.predict(42, *chat_controls(temperature="0.25", top_k=None, max_tokens=77.0, seed="7"), api_name="/chat")
    (_, params, _), = double.generated[sent:]
    assert (params.temperature, params.top_k, params.max_tokens, params.seed) == (0.25, -1, 77, 7)
    assert isinstance(params.max_tokens, int)
    user = double.renderer.calls[-1]["conversations"][0][-1]
    assert user["role"] == "user" and user["content"] == [{"type": "text", "text": "42"}]

    for controls, named in (({"max_tokens": "lots"}, "max tokens is not a number (lots)"),
                            ({"top_p": 1.5}, "top-p is 1.5, outside 0.05–1"),  # past the slider's end
                            ({"temperature": -1}, "temperature is -1, outside 0–2")):
        refused = client.predict("again", *chat_controls(**controls), api_name="/chat")
        assert len(double.generated) == sent + 1  # not sent
        assert named in refused[2]  # the figures line says which control (gr.State outputs are not sent)
