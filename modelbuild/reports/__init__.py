"""The reports: one model of a run (model.py) rendered as JSON, Markdown, JUnit XML and HTML."""

from modelbuild.reports.model import collect, SCHEMA_ID
from modelbuild.reports.write import write_reports

__all__ = ["SCHEMA_ID", "collect", "write_reports"]
