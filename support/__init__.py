"""What the tests and the benchmarks share, outside the product (``dots3_demo`` never fakes generation).

* :mod:`support.doubles` — the scripted double of vLLM's ``AsyncLLM`` (real ``RequestOutput`` objects)
  and its recording renderer stand-in;
* :mod:`support.media_factory` — synthetic video, audio and images (PyAV / PIL / numpy, no downloads);
* :mod:`support.uploads` — uploads run the way the page's events run them (``handlers.inspect_*``, then the
  status line, the shared views and the figures), returning what the page shows;
* :mod:`support.live` — the app live in the test's own process, on a free loopback port;
* :mod:`support.servers` — real vLLM processes (vLLM's CPU build in its own venv): ``app.py`` with an
  in-process engine and vLLM's own OpenAI server, on loopback.

Imported from the repository root: pytest puts it on ``sys.path`` (``tests`` is a package), and the
benchmarks run as modules from there (``python -m benchmarks.soak``).
"""
