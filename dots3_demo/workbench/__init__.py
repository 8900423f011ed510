"""The researcher's workbench (issue 12): compare two settings, rate replies, record a session (zip and
HTML report) and evaluate a set of questions from the command line.

- ``workbench.records``: the shapes every part shares (an answer as it ended, a compare round);
- the other modules each hold one part. Nothing is done at import.
"""
