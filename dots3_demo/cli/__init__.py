"""The command line: every flag of ``python app.py`` and of its sub-commands is defined here.

- ``cli.studio``: ``python app.py``'s own flags, read after those in ``$DOTS3_STUDIO_ARGS``;
- ``cli.limits``: the upload limits (``--max-file-size``, …), part of the studio's flags;
- ``cli.engine``: ``--engine``, ``--endpoint`` and every vLLM engine flag, and the engine they ask for
  (the studio's and ``smoke``'s);
- ``cli.inspect``: ``python app.py inspect FILE... --json`` (its flags and the command);
- ``cli.smoke``: ``python app.py smoke`` (its flags and the command; the test is ``dots3_demo.workbench.smoke``);
- ``cli.eval``: ``python app.py eval SET.jsonl --out DIR [--sweep NAME=V1,V2,...]`` (its flags and the command; the
  run is ``workbench.batch``, a sweep ``workbench.sweep``);
- ``cli.eval_compare``: ``python app.py eval-compare RUN_A RUN_B`` (two eval runs paired; ``workbench.paired``);
- ``cli.eval_import``: ``python app.py eval-import BENCHMARK ITEMS --out SET.jsonl`` (Video-MME, MVBench,
  LongVideoBench items as a set; ``workbench.importers``);
- ``cli.eval_export``: ``python app.py eval-export DIR --inspect LOG.eval`` (a run as inspect-ai's log;
  ``workbench.inspect_log``);
- ``cli.parser``: what they share (vLLM's parser class, argparse ``type=`` functions).

This package imports nothing itself; import the module of the command you need.
"""
