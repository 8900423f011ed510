"""The one error type the inspector raises for input a user can fix."""


class InspectionError(ValueError):
    """A file or setting that cannot be inspected; ``str(err)`` is a one-line reason."""
