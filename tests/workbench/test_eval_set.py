"""``SET.jsonl`` read into typed items: every way a line can be wrong becomes that line's one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dots3_demo.engine.protocol import SamplingSettings
from dots3_demo.workbench.evalset import EvalItem, SetDefaults, SetLineError, parse_line, read_set

DEFAULTS = SetDefaults(seq=8192)


def parse(data: object, folder: str = "sets") -> EvalItem | SetLineError:
    return parse_line(json.dumps(data), 7, folder, DEFAULTS)


def ok(**extra: object) -> dict:
    return {"id": "q1", "media": ["clips/a.mp4"], "prompt": "What happens?", **extra}


def test_a_full_line_becomes_a_typed_item():
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    item = parse(ok(system="Be brief.", expect=["Room 3"], seq=4096, output_reserve=512, audio_cap=0.5,
                    k_mode="whole", sampling={"temperature": 0, "top_k": 5, "seed": 3, "max_tokens": 64},
                    tools=tools))
    assert isinstance(item, EvalItem)
    assert item.id == "q1" and item.line == 7 and item.prompt == "What happens?" and item.system == "Be brief."
    assert item.media == ("clips/a.mp4",) and item.files == (str(Path("sets/clips/a.mp4")),)
    assert item.expect == ("Room 3",)
    assert (item.video.seq, item.video.output_reserve, item.video.audio_cap, item.video.k_mode) == (4096, 512, 0.5,
                                                                                                    "whole")
    # the engine plans the video for the reply's max tokens: one number
    assert item.video.max_new_tokens == item.sampling.max_tokens == 64
    assert item.sampling == SamplingSettings(temperature=0.0, top_k=5, seed=3, max_tokens=64)
    assert item.tools[0]["function"]["name"] == "get_weather"


def test_defaults_fill_what_a_line_leaves_out():
    item = parse(ok(media=[]))
    assert isinstance(item, EvalItem)
    assert item.system is None and item.expect == () and item.tools == () and item.files == ()
    assert item.video.seq == 8192 and item.video.output_reserve is None and item.video.k_mode == "eval_ek"
    assert item.sampling == SamplingSettings() and item.video.max_new_tokens == SamplingSettings().max_tokens


def test_a_choice_in_the_sampling_forces_the_reply_to_one_of_its_strings():
    from dots3_demo.engine.protocol import StructuredOutputs

    item = parse(ok(sampling={"temperature": 0, "structured_outputs": {"choice": ["A", "B", "C", "D"]}}))
    assert isinstance(item, EvalItem)
    assert item.sampling.structured_outputs == StructuredOutputs(("A", "B", "C", "D"))
    assert parse(ok()).sampling.structured_outputs is None


def test_max_new_tokens_sets_the_reply_length_too():
    item = parse(ok(max_new_tokens=300))
    assert isinstance(item, EvalItem) and item.sampling.max_tokens == item.video.max_new_tokens == 300


def test_media_paths_are_relative_to_the_set_file(tmp_path):
    (tmp_path / "nested").mkdir()
    set_file = tmp_path / "nested" / "set.jsonl"
    set_file.write_text(json.dumps(ok(media=["../x.png", "y.wav"])) + "\n")
    (item,) = read_set(set_file, DEFAULTS)
    assert isinstance(item, EvalItem)
    assert item.files == (str(tmp_path / "x.png"), str(tmp_path / "nested" / "y.wav"))


@pytest.mark.parametrize("data, words", [
    (ok(temperature=0), "unknown key(s) 'temperature'"),
    ({"media": [], "prompt": "p"}, "missing key(s) 'id'"),
    ({"id": "a", "prompt": "p"}, "missing key(s) 'media'"),
    (ok(id=""), "id must be a non-empty string"),
    (ok(id=3), "id must be a non-empty string, got number 3"),
    (ok(media="a.mp4"), "media must be a list of strings"),
    (ok(media=[""]), "media holds an empty path"),
    (ok(prompt=["a"]), "prompt must be a string"),
    (ok(expect="Room 3"), "expect must be a list of strings"),
    (ok(seq="4096"), "seq must be a whole number"),
    (ok(seq=True), "seq must be a whole number"),
    (ok(audio_cap="half"), "audio_cap must be a number"),
    (ok(seq=1000, output_reserve=999), "budget: output reserve"),
    (ok(k_mode="every"), "budget: k_mode must be one of"),
    (ok(sampling={"presence_penalty": 1}), "unknown sampling key(s) 'presence_penalty'"),
    (ok(sampling=[1]), "sampling must be an object"),
    (ok(sampling={"top_k": 1.5}), "sampling.top_k must be a whole number"),
    (ok(sampling={"structured_outputs": {"regex": "[AB]"}}), "sampling.structured_outputs must be {\"choice\": [str"),
    (ok(sampling={"structured_outputs": {"choice": []}}), "sampling.structured_outputs.choice must be a list of"),
    (ok(sampling={"structured_outputs": {"choice": ["A", 2]}}), "sampling.structured_outputs.choice must be a list of"),
    (ok(sampling={"temperature": -1}), "sampling: vLLM refuses it: temperature must be non-negative"),
    (ok(sampling={"top_p": 2}), "sampling: vLLM refuses it: top_p must be in (0, 1]"),
    (ok(max_new_tokens=100, sampling={"max_tokens": 200}), "max_new_tokens 100 and sampling.max_tokens 200 differ"),
    (ok(tools=[{"type": "function", "function": {"name": "bad name"}}]), "tools: tool #1 (bad name): name may use"),
    (ok(tools={"name": "x"}), "tools: tools must be a JSON array"),
])
def test_a_bad_line_is_one_line_error_naming_what_is_wrong(data, words):
    entry = parse(data)
    assert isinstance(entry, SetLineError), entry
    assert words in entry.error and "\n" not in entry.error
    assert entry.line == 7


def test_an_error_keeps_the_id_and_expect_strings_the_line_gave():
    entry = parse(ok(temperature=0, expect=["a"]))
    assert isinstance(entry, SetLineError) and entry.id == "q1" and entry.expect == ("a",)


@pytest.mark.parametrize("text, words", [
    ('{"id": "a", "media": [', "not a JSON object"),
    ("[1, 2]", "not a JSON object: a JSON array"),
    ('{"id": "a", "media": [], "prompt": "p", "seq": NaN}', "NaN is not JSON"),
    ("\x00\x01", "not a JSON object"),
])
def test_an_unreadable_line_is_an_error(text, words):
    entry = parse_line(text, 3, "", DEFAULTS)
    assert isinstance(entry, SetLineError) and words in entry.error and entry.id is None


def test_read_set_keeps_order_skips_blank_lines_and_refuses_a_second_use_of_an_id(tmp_path):
    path = tmp_path / "set.jsonl"
    lines = [json.dumps(ok(id="a")), "", "not json", json.dumps(ok(id="b")), "   ", json.dumps(ok(id="a"))]
    path.write_text("\n".join(lines) + "\n")
    entries = read_set(path, DEFAULTS)
    assert [(type(e).__name__, e.line) for e in entries] == [("EvalItem", 1), ("SetLineError", 3), ("EvalItem", 4),
                                                           ("SetLineError", 6)]
    assert entries[3].error == "duplicate id 'a' (first on line 1)"
    # the duplicate has no id of its own: its result is keyed by its line, never by the first line's id
    assert entries[3].id is None and entries[3].key == "line 6" and entries[0].key == "a"


def test_an_id_belongs_to_the_first_line_that_names_it_even_a_line_that_cannot_run(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in [ok(id="a", bogus=1), ok(id="a"), ok(id="a", seq=-1)]))
    first, second, third = read_set(path, DEFAULTS)
    assert isinstance(first, SetLineError) and first.id == "a" and first.error.startswith("unknown key(s) 'bogus'")
    assert isinstance(second, SetLineError) and second.id is None and second.key == "line 2"
    assert second.error == "duplicate id 'a' (first on line 1)"
    assert isinstance(third, SetLineError) and third.id is None and third.error.startswith(
        "duplicate id 'a' (first on line 1); budget: ")


def test_tags_are_free_form_strings_carried_by_the_item_and_unknown_keys_stay_errors():
    item = parse(ok(tags=["smoke", "room 3"]))
    assert isinstance(item, EvalItem) and item.tags == ("smoke", "room 3")
    bad = parse(ok(tags="smoke"))
    assert isinstance(bad, SetLineError) and bad.error.startswith("tags must be a list of strings")
    misspelt = parse(ok(expcet=["x"], tags=["kept"]))
    assert isinstance(misspelt, SetLineError) and "unknown key(s) 'expcet'" in misspelt.error
    assert "free-form labels go in tags" in misspelt.error and misspelt.tags == ("kept",)
