"""Importing a broken or hostile session zip: one clear line, and nothing written outside the session's folder
(nothing left at all: the import unpacks into a temporary folder inside it and removes it on failure)."""

from __future__ import annotations

import json
import struct
import uuid
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dots3_demo.core.state import MediaItem, StudioState, new_session
from dots3_demo.workbench import record as rec
from tests.workbench.conftest import SETTINGS

Entry = tuple[str | zipfile.ZipInfo, bytes]


@pytest.fixture(scope="module")
def base(workbench_media, workbench_reports, profile, tmp_path_factory) -> tuple[dict[str, Any], str, bytes]:
    """A valid session zip's parts: (session.json's object, the image's name in the zip, its bytes)."""
    image = str(workbench_media["image"])
    studio = StudioState(settings=SETTINGS, images=((image, workbench_reports["image"]),))
    session = replace(new_session(), media=(MediaItem("image", image, tokens=workbench_reports["image"].tokens),),
                      messages=({"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}},
                                                             {"type": "text", "text": "hi"}]},),
                      display=({"role": "user", "content": {"path": image, "alt_text": "picture.png"}},
                               {"role": "user", "content": "hi"}),
                      regen_mark=(1, 2, 0, 1))
    record = rec.build_record(session, studio, rec.ChatSetup(), profile=profile)
    with zipfile.ZipFile(rec.export_zip(record, tmp_path_factory.mktemp("base"))) as archive:
        data = json.loads(archive.read(rec.SESSION_JSON))
        (name,) = [n for n in archive.namelist() if n.startswith("media/")]
        return data, name, archive.read(name)


def _zip(path: Path, entries: list[Entry]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            archive.writestr(name, data)
    return path


def _session(data: dict[str, Any]) -> bytes:
    return json.dumps(data).encode()


def _refused(tmp_path: Path, zip_path: Path, match: str, limits: rec.ZipLimits | None = None) -> str:
    """Import ``zip_path`` into ``tmp_path/box/dest``: it must fail with ``match`` and write nothing."""
    dest = tmp_path / "box" / "dest"
    dest.parent.mkdir()
    before = set(tmp_path.rglob("*"))
    with pytest.raises(rec.RecordError, match=match) as caught:
        rec.import_zip(zip_path, dest, limits=limits or rec.ZipLimits())
    message = str(caught.value)
    assert "\n" not in message and len(message) < 300, message
    assert set(tmp_path.rglob("*")) - before <= {dest}  # at most the (empty) session folder
    assert not dest.exists() or list(dest.iterdir()) == []
    return message


def test_a_valid_zip_imports(tmp_path, base):
    data, name, image = base
    record = rec.import_zip(_zip(tmp_path / "ok.zip", [(rec.SESSION_JSON, _session(data)), (name, image)]),
                            tmp_path / "dest")
    (media,) = record.media
    assert Path(media.path).read_bytes() == image and Path(media.path).is_relative_to(tmp_path / "dest")
    assert record.transcript.messages[0]["content"][0]["image_url"]["url"] == media.path


def test_not_a_zip(tmp_path):
    path = tmp_path / "notes.zip"
    path.write_text("just text\n")
    _refused(tmp_path, path, r"^notes.zip is not a zip file")


@pytest.mark.parametrize(("evil", "match"), [
    ("../evil.txt", "points outside its folder"),
    ("media/../../evil.txt", "points outside its folder"),
    (f"/tmp/record-evil-{uuid.uuid4().hex}.txt", "points outside its folder"),
    ("C:/evil.txt", "points outside its folder"),
    ("..\\evil.txt", "backslash"),
    ("media\\01-picture.png", "backslash"),
])
def test_zip_slip_names(tmp_path, base, evil, match):
    data, name, image = base
    path = _zip(tmp_path / "evil.zip", [(rec.SESSION_JSON, _session(data)), (name, image), (evil, b"owned")])
    _refused(tmp_path, path, match)
    if evil.startswith("/"):
        assert not Path(evil).exists()


def test_symlink_entry(tmp_path, base):
    data, name, _ = base
    link = zipfile.ZipInfo(name)
    link.external_attr = (0o120777 << 16)  # a symbolic link to /etc/passwd, as `zip --symlinks` stores it
    path = _zip(tmp_path / "link.zip", [(rec.SESSION_JSON, _session(data)), (link, b"/etc/passwd")])
    _refused(tmp_path, path, "link or special file")


def test_zip_bomb_by_its_headers(tmp_path, base):
    data, name, _ = base
    path = _zip(tmp_path / "bomb.zip", [(rec.SESSION_JSON, _session(data)), (name, bytes(4 * 1024**2))])
    assert path.stat().st_size < 64 * 1024  # 4 MiB of zeros, packed small
    _refused(tmp_path, path, r"unpacked; the limit is 1,000,000", rec.ZipLimits(max_file_bytes=1_000_000))


def test_zip_bomb_in_many_entries(tmp_path, base):
    data, name, _ = base
    entries: list[Entry] = [(rec.SESSION_JSON, _session(data)), (name, bytes(600_000)), ("media/x", bytes(600_000))]
    _refused(tmp_path, _zip(tmp_path / "total.zip", entries), "unpacks to more than 1,000,000 bytes",
             rec.ZipLimits(max_total_bytes=1_000_000))


def _lie_about_size(path: Path, name: str, claimed: int) -> None:
    """Rewrite ``name``'s uncompressed size in its local header and the central directory to ``claimed``."""
    raw = bytearray(path.read_bytes())
    encoded = name.encode()
    local = raw.find(b"PK\x03\x04")
    while local != -1:
        if raw[local + 30: local + 30 + len(encoded)] == encoded:
            struct.pack_into("<I", raw, local + 22, claimed)
        local = raw.find(b"PK\x03\x04", local + 4)
    central = raw.find(b"PK\x01\x02")
    while central != -1:
        if raw[central + 46: central + 46 + len(encoded)] == encoded:
            struct.pack_into("<I", raw, central + 24, claimed)
        central = raw.find(b"PK\x01\x02", central + 4)
    path.write_bytes(bytes(raw))


def test_zip_bomb_that_lies_in_its_headers(tmp_path, base):
    data, name, _ = base
    path = _zip(tmp_path / "liar.zip", [(rec.SESSION_JSON, _session(data)), (name, bytes(8 * 1024**2))])
    _lie_about_size(path, name, 1000)
    with zipfile.ZipFile(path) as archive:
        assert archive.getinfo(name).file_size == 1000  # the headers pass the size checks
    _refused(tmp_path, path, "the zip is damaged", rec.ZipLimits(max_file_bytes=100_000))


def test_too_many_entries(tmp_path, base):
    data, name, image = base
    extra: list[Entry] = [(f"media/pad{i}", b"") for i in range(10)]
    path = _zip(tmp_path / "many.zip", [(rec.SESSION_JSON, _session(data)), (name, image), *extra])
    _refused(tmp_path, path, r"holds 12 entries; a session file holds at most 5", rec.ZipLimits(max_entries=5))


def test_duplicate_entries(tmp_path, base):
    data, name, image = base
    with pytest.warns(UserWarning, match="Duplicate name"):
        path = _zip(tmp_path / "dup.zip", [(rec.SESSION_JSON, _session(data)), (name, image), (name, b"other")])
    _refused(tmp_path, path, "twice")


def _with(data: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**json.loads(json.dumps(data)), **changes}


@pytest.mark.parametrize(("change", "match"), [
    ({"version": 3}, r"^this session file has format version 3, written by a newer Dots3 Studio; this studio "
                     r"reads versions 1 and 2$"),
    ({"version": "1"}, r'format version "1"; this studio reads versions 1 and 2'),
    ({"version": 0}, r"^this session file has format version 0; this studio reads versions 1 and 2$"),
    ({"version": None}, r"^session.json has no format version"),
    ({"format": "something-else"}, r"is not a Dots3 Studio session"),
    ({"surprise": 1}, r"^session.json is not a valid session: session.json: unknown field 'surprise'$"),
    ({"budget": {"seq": "lots"}}, r"session.json.budget.seq: expected a whole number, got 'lots'"),
    ({"budget": {"seq": 100, "output_reserve": 100}}, r"budget is not usable: output reserve 100"),
])
def test_bad_session_json(tmp_path, base, change, match):
    data, name, image = base
    changed = _with(data, **change)
    if change.get("version", 0) is None:
        del changed["version"]
    path = _zip(tmp_path / "bad.zip", [(rec.SESSION_JSON, _session(changed)), (name, image)])
    _refused(tmp_path, path, match)


def test_unknown_nested_field(tmp_path, base):
    data, name, image = base
    changed = _with(data)
    changed["transcript"]["media"][0]["secret"] = "x"
    path = _zip(tmp_path / "nested.zip", [(rec.SESSION_JSON, _session(changed)), (name, image)])
    _refused(tmp_path, path, r"session.json.transcript.media\[0\]: unknown field 'secret'")


def test_corrupt_json_and_no_session(tmp_path, base):
    data, name, image = base
    path = _zip(tmp_path / "corrupt.zip", [(rec.SESSION_JSON, _session(data)[:-20]), (name, image)])
    _refused(tmp_path, path, r"^session.json is not valid JSON \(.* at line 1")
    other = tmp_path / "other"
    other.mkdir()
    _refused(other, _zip(other / "none.zip", [(name, image)]), r"holds no session.json")


def test_missing_media(tmp_path, base):
    data, name, _ = base
    path = _zip(tmp_path / "missing.zip", [(rec.SESSION_JSON, _session(data))])
    _refused(tmp_path, path, rf"lacks '{name}', which session.json names \(missing media\)")


@pytest.mark.parametrize("where", ["media", "message", "display", "panels"])
def test_references_outside_the_record(tmp_path, base, where):
    """A record that points the chat (or a panel) at a file of this machine is refused: only its own media."""
    data, name, image = base
    changed = _with(data)
    if where == "media":
        changed["media"][0]["path"] = "../../etc/passwd"
        match = "outside the zip's media folder"
    elif where == "message":
        changed["transcript"]["messages"][0]["content"][0]["image_url"]["url"] = "/etc/passwd"
        match = r"names '/etc/passwd', which is not one of the session's media files"
    elif where == "display":
        changed["transcript"]["display"][0]["content"]["path"] = "/etc/passwd"
        match = "which is not one of the session's media files"
    else:
        changed["panels"]["video"] = "/etc/passwd"
        match = "which is not one of the session's media files"
    path = _zip(tmp_path / "outside.zip", [(rec.SESSION_JSON, _session(changed)), (name, image)])
    _refused(tmp_path, path, match)


def test_deeply_nested_json(tmp_path, base):
    _, name, image = base
    nested = b'{"format": "dots3-studio-session", "version": 1, "transcript": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    path = _zip(tmp_path / "deep.zip", [(rec.SESSION_JSON, nested), (name, image)])
    _refused(tmp_path, path, "nested too deeply")


def test_media_name_with_a_line_break(tmp_path, base):
    data, name, image = base
    changed = _with(data)
    changed["media"][0]["path"] = name + "\n"
    path = _zip(tmp_path / "newline.zip", [(rec.SESSION_JSON, _session(changed)), (name, image), (name + "\n", image)])
    _refused(tmp_path, path, "outside the zip's media folder")
