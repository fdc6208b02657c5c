"""GitHub Actions workflow commands: one annotation per finding, shown on the run's page.

Pure: returns lines; the CLI writes them (to stderr) only when GITHUB_ACTIONS=true.
Escaping follows the runner's rules (actions/toolkit `command.ts`): in the message, % CR
LF become %25 %0D %0A; in properties, also ':' and ',' become %3A and %2C, because they
separate properties. Without it a message with a newline ends the command early and the
rest of the line is a command of its own (a forged `::error::`). Anything else that is not
printable is shown escaped (`oversub.render.escape`), so an escape sequence in a process
name cannot drive the log viewer either.
"""

# No `from __future__ import annotations` here: that import binds the name `annotations`,
# which is this module's public function. Every annotation below is valid at runtime on 3.10.

from oversub.core.names import Severity
from oversub.core.results import Gate, Summary
from oversub.render.escape import github_data as escape_data
from oversub.render.escape import github_property as escape_property


def annotations(s: Summary, gate: Gate) -> list[str]:
    """One workflow command per finding worth showing, worst first.

    Failing findings (`gate`, from `analysis.policy`: the critical ones under `--fail-on
    costly`, else those at or above its verdict) give `::error title=oversub RULE::MESSAGE
    Fix: FIX`; findings that do not fail but have severity warning or critical give the
    same as `::warning`;
    non-failing info findings give nothing (they are in the reports). A run that was not
    judged gives one `::error title=oversub::not judged: REASON`, and no finding fails.
    """
    lines = []
    if s.verdict is None:
        # Nothing is judged, so nothing fails; the reason is the error of the run.
        reason = escape_data(f"not judged: {s.not_judged or 'nothing was measured'}")
        lines.append(f"::error title={escape_property('oversub')}::{reason}")
    for f in s.findings:
        if gate.fails(f):
            command = "error"
        elif f.severity in (Severity.WARNING, Severity.CRITICAL):
            command = "warning"
        else:
            continue
        title = escape_property(f"oversub {f.rule}")
        lines.append(f"::{command} title={title}::{escape_data(f'{f.message} Fix: {f.fix}')}")
    return lines
