"""The one error type the inspector raises for input a user can fix (defined in ``dots3_demo.errors``)."""

from dots3_demo.errors import InspectionError as InspectionError


def one_line(text: object, limit: int = 200) -> str:
    """The first non-empty line of ``text``, shortened to ``limit`` characters."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    first = lines[0] if lines else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"
