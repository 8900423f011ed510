"""The studio's Gradio-free core, below the UI and the workbench: what one turn is, from the upload panels to
the engine and back.

- ``state``: a browser session's state (the uploads and their reports, the conversation); ``records``: the shapes
  every part keeps (a media item, an answer with the setting it ran with, a rating, a compare round);
- ``turns``: the one turn builder (media + plans + budget + sampling + history + tools → ``TurnRequest``);
- ``reply``: the one reply accumulator (the engine's deltas → text, reasoning, tool calls, figures, finish);
- ``counts``: the engine's prompt counts against the inspector's; ``settings``: controls read as settings;
  ``pacing``: how often a streaming reply updates a page.

The chat, compare, ``app.py eval`` and ``app.py smoke`` build and accumulate every turn here. Nothing is done at
import.
"""
