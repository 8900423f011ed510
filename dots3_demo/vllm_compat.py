"""The one door to vLLM's dots3_note CPU code, and the work-arounds it needs.

Why this module exists
----------------------
1. ``vllm/models/dots3_note/__init__.py`` imports the NVIDIA model (and through it
   ``vllm_flash_attn``), which fails on a host without CUDA. The CPU parts we need —
   ``common/processor.py`` and ``common/video.py`` — do not depend on it. There we register
   ``vllm.models.dots3_note`` as a bare package whose ``__path__`` is the real folder, so its
   ``common`` sub-modules import unchanged. The normal import is tried first only where vLLM's
   platform is CUDA (the NVIDIA model's only platform, and the one where an engine in this
   process needs the real package); elsewhere it imported ~1,300 more modules (8 s on the 2-core
   CI machine, a third of ``python app.py inspect``) before failing at ``vllm_flash_attn``.
2. ``common/video.py`` calls ``hashlib.sha1(...)`` without ``usedforsecurity=False`` when a
   video's sound track is interleaved (it seeds the ``logk`` grouping, not security). On FIPS
   builds that refuse SHA-1 this raises. We give that one module a ``hashlib`` whose ``sha1``
   passes ``usedforsecurity=False`` (the form vLLM's own ``utils/hashing.py`` uses); the digest
   is bit-identical, so results do not change.
3. ``AsyncEngineArgs.add_cli_args`` (the flags of ``vllm serve``) instantiates config defaults,
   and ``DeviceConfig()`` raises "Failed to infer device type" where vLLM finds no device (the
   CUDA build on a host without a GPU: vLLM's ``UnspecifiedPlatform``, whose ``device_type`` is
   ""). :func:`engine_flags_platform` lends that platform the device type ``"cpu"`` while the
   flags are built, so vLLM builds its own full flag set on any host. The platform object stays
   the same (modules that imported ``current_platform`` keep it), its enum stays
   ``UNSPECIFIED`` (``is_cpu()`` etc. do not change), and the loan ends with the block. On a host
   with a device nothing is done.

4. vLLM's ``preprocess_dots3_note_video`` returns a video's frames all at once, after its last one.
   :func:`video_preprocess_watching` runs the very same function (its code object, not a copy of its source)
   with a name space of its own in which ``_decode_frames`` reports each frame as it makes it: the
   inspector shows the frames as vLLM produces them. Nothing of vLLM's module changes, so the engine's own
   preprocessing in this process is untouched.

Everything else in the project imports vLLM's dots3_note code from here.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from dots3_demo.rebinding import same_function

_PACKAGE = "vllm.models.dots3_note"


def _ensure_dots3_package() -> None:
    """Make ``vllm.models.dots3_note.common`` importable on hosts without CUDA."""
    if _PACKAGE in sys.modules:
        return
    if _platform_is_cuda():
        try:
            importlib.import_module(_PACKAGE)
            return
        except Exception:  # noqa: BLE001 - any failure of the NVIDIA import chain
            sys.modules.pop(_PACKAGE, None)
    spec = importlib.util.find_spec("vllm.models")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("vLLM is not installed (need vllm==0.32.0)")
    folder = Path(next(iter(spec.submodule_search_locations))) / "dots3_note"
    if not folder.is_dir():
        raise ImportError(f"this vLLM has no dots3_note model (looked in {folder}); need vllm==0.32.0")
    bare = types.ModuleType(_PACKAGE)
    bare.__path__ = [str(folder)]
    bare.__package__ = _PACKAGE
    sys.modules[_PACKAGE] = bare


def _platform_is_cuda() -> bool:
    """Whether vLLM runs on CUDA here, the one platform where its dots3_note model can import."""
    try:
        from vllm.platforms import current_platform

        return current_platform.is_cuda()
    except Exception:  # noqa: BLE001 - platform detection failed: try the normal import, as before
        return True


class _FipsSafeHashlib(types.ModuleType):
    """``hashlib`` for vLLM's video module: SHA-1 only seeds a RNG there, it guards nothing."""

    def __init__(self) -> None:
        super().__init__("hashlib")

    def __getattr__(self, name: str) -> Any:  # everything but sha1 is hashlib's own
        return getattr(hashlib, name)

    @staticmethod
    def sha1(data: bytes = b"", **kwargs: Any) -> Any:
        kwargs.setdefault("usedforsecurity", False)
        return hashlib.sha1(data, **kwargs)


@cache
def processor_module() -> types.ModuleType:
    """``vllm.models.dots3_note.common.processor`` (Dots3NoteProcessor and friends)."""
    _ensure_dots3_package()
    return importlib.import_module(f"{_PACKAGE}.common.processor")


@cache
def video_module() -> types.ModuleType:
    """``vllm.models.dots3_note.common.video``, with its SHA-1 made FIPS-safe."""
    _ensure_dots3_package()
    module = importlib.import_module(f"{_PACKAGE}.common.video")
    if not isinstance(getattr(module, "hashlib", None), _FipsSafeHashlib):
        setattr(module, "hashlib", _FipsSafeHashlib())  # noqa: B010 - a module attribute mypy cannot see
    return module


def dots_tool_parser_class() -> type:
    """vLLM's ``DotsToolParser`` (imports as is, CUDA or not)."""
    from vllm.tool_parsers.dots_tool_parser import DotsToolParser

    return DotsToolParser


def served_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``tools`` as vLLM's OpenAI server hands them to the chat template (each read as its
    ``ChatCompletionToolsParam`` and dumped again: the field order and the defaults it fills in are the
    server's). The in-process engine, the context meter and the renderer here then build the prompt that
    ``vllm serve`` builds for the same request, byte for byte."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionToolsParam

    return [ChatCompletionToolsParam.model_validate(tool).model_dump() for tool in tools]


@contextmanager
def engine_flags_platform() -> Iterator[None]:
    """While the block runs, vLLM can build its engine flags on a host where it finds no device.

    Wrap ``AsyncEngineArgs.add_cli_args`` (and nothing longer) in it; see work-around 3 above.
    """
    from vllm.platforms import current_platform

    if current_platform.device_type:  # vLLM found a device (or is the CPU build): nothing to lend
        yield
        return
    current_platform.device_type = "cpu"  # an instance attribute over the class's ""
    try:
        yield
    finally:
        del current_platform.device_type


def load_image_bytes(data: bytes) -> Any:
    """Image bytes loaded as vLLM's chat path loads them (``ImageMediaIO``, RGB): the PIL image the
    inspector measures and the in-process engine is given. vLLM raises ``ValueError`` for bytes it
    cannot decode."""
    from vllm.multimodal.media.image import ImageMediaIO

    return ImageMediaIO(image_mode="RGB").load_bytes(data).media


def freeze_gc_heap() -> None:
    """vLLM's own ``freeze_gc_heap`` (``vllm.utils.gc_utils``): collect, then move every object alive now out of
    the garbage collector's reach, as vLLM's OpenAI server does once it has started ("Reduces pause times of
    oldest generation collections"). In the studio's process (~900,000 objects from vLLM, torch and Gradio
    after start-up) one full collection held the event loop for ~0.5 s: every streamed reply and every new
    session waited on it."""
    from vllm.utils.gc_utils import freeze_gc_heap as vllm_freeze_gc_heap

    vllm_freeze_gc_heap()


# Each frame ``_decode_frames`` makes: its place in vLLM's order, the seconds vLLM stamps it with, and the very
# image object vLLM puts in the video's parts.
FrameMade = Callable[[int, float, Any], None]
_WATCHED_NAMES = ("_open_video", "_jpeg_roundtrip")  # what _decode_frames must call for the frames to be watched


class _WatchedDecoder:
    """vLLM's ``VideoDecoder`` as ``_decode_frames`` got it, keeping the frame indices of its last successful
    ``get_frames_at`` (vLLM retries with fewer when the last ones cannot be decoded)."""

    def __init__(self, decoder: Any) -> None:
        self._decoder = decoder
        self.indices: list[int] = []
        self.made = 0  # frames made from it so far

    def __getattr__(self, name: str) -> Any:
        return getattr(self._decoder, name)

    def get_frames_at(self, indices: list[int], *args: Any, **kwargs: Any) -> Any:
        batch = self._decoder.get_frames_at(*args, indices=indices, **kwargs)
        self.indices = list(indices)
        return batch

    def seconds(self, position: int) -> float:
        """The time ``_decode_frames`` stamps its ``position``-th frame with: its index over the video's average
        frame rate (25 when the file has none), to the millisecond (``tests/inspection/test_frames_watched.py``
        checks it equals the timestamp vLLM puts before the frame)."""
        fps = float(getattr(self._decoder.metadata, "average_fps", 0) or 0) or 25.0
        return round(self.indices[position] / fps, 3)


def video_preprocess_watching(made: FrameMade) -> Callable[..., Any]:
    """vLLM's ``preprocess_dots3_note_video`` (same arguments, same result) that hands each frame to ``made`` the
    moment ``_decode_frames`` has made it (decoded, resized, JPEG round-tripped), before it makes the next, on the
    calling thread; whatever ``made`` raises stops the call. Where this vLLM's ``_decode_frames`` no longer calls
    ``_open_video`` and ``_jpeg_roundtrip`` (work-around 4), its function is returned as it is: the frames then
    come with the rest."""
    video = video_module()
    decode_frames, preprocess = video._decode_frames, video.preprocess_dots3_note_video
    if not (set(_WATCHED_NAMES) <= set(decode_frames.__code__.co_names)
            and "_decode_frames" in preprocess.__code__.co_names):
        return preprocess
    opened: list[_WatchedDecoder] = []  # the decoder of the call running (_decode_frames opens one)

    def open_video(video_bytes: bytes) -> _WatchedDecoder:
        opened[:] = [_WatchedDecoder(video._open_video(video_bytes))]
        return opened[0]

    def jpeg_roundtrip(image: Any, quality: int) -> Any:
        frame = video._jpeg_roundtrip(image, quality)
        if opened:
            decoder = opened[0]
            decoder.made += 1
            made(decoder.made - 1, decoder.seconds(decoder.made - 1), frame)
        return frame

    scope = dict(vars(video))  # the module's names, with the two watched
    scope.update(_open_video=open_video, _jpeg_roundtrip=jpeg_roundtrip)
    scope["_decode_frames"] = same_function(decode_frames, scope)
    return same_function(preprocess, scope)

