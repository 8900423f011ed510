"""The command line: every flag of ``python app.py`` and of its sub-commands is defined here.

- ``cli.inspect``: ``python app.py inspect FILE... --json`` (its flags and the command).

This package imports nothing itself; import the module of the command you need.
"""
