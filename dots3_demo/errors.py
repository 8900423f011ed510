"""The error a user can fix: importable from anywhere (no imports), so the video budget and the
inspector raise the same class (``dots3_demo.inspection.errors`` re-exports it)."""


class InspectionError(ValueError):
    """A file or setting that cannot be inspected; ``str(err)`` is a one-line reason."""
