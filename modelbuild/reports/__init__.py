"""The reports: one model of a run (model.py) rendered as JSON, Markdown, JUnit XML and HTML."""

from modelbuild.reports.model import SCHEMA_ID, collect
from modelbuild.reports.write import write_reports

__all__ = ["SCHEMA_ID", "collect", "write_reports"]
