"""junit.xml: one test case per build and per gate, so CI systems show failures natively."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from modelbuild.reports.model import Report


def render(report: Report) -> str:
    suite = ET.Element("testsuite", name="modelbuild")
    cases = failures = 0
    for b in report.builds:
        stage_failure = next(
            (f"{stage}: {s.error or 'failed'}" for stage, s in b.stages.items() if s.status in ("failed", "skipped")),
            None,
        )
        cases += 1
        failures += _case(suite, "builds", b.name, stage_failure, sum(s.seconds for s in b.stages.values()))
        for g in b.gates:
            cases += 1
            message = None if g.passed else f"{g.name}: value {g.value} limit {g.limit} {g.detail}".strip()
            failures += _case(suite, b.name, g.name, message, 0.0, skipped=None if g.applicable else g.detail)
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def _case(suite, classname: str, name: str, failure: str | None, seconds: float, skipped: str | None = None) -> int:
    case = ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{seconds:.3f}")
    if skipped is not None:  # a gate that does not apply to this build: CI shows it skipped, with why
        ET.SubElement(case, "skipped", message=skipped)
    if failure:
        ET.SubElement(case, "failure", message=failure).text = failure
        return 1
    return 0
