"""The researcher's workbench (issue 12): compare two settings, rate replies, record a session (zip and
HTML report) and evaluate a set of questions from the command line.

- each module holds one part: ``compare``, ``record`` (the session file and its report), ``batch`` with
  ``evalset``, ``eval_results`` and ``batch_report`` (``app.py eval``), ``smoke`` (``app.py smoke``);
- the shapes they share (an answer as it ended, a compare round) are ``core.records``'; every turn they send is
  built by ``core.turns`` and accumulated by ``core.reply``. No Gradio here. Nothing is done at import.
"""
