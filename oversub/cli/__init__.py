"""The command line: click wiring only, one module per command.

`app` holds the `oversub` group and `main`, the one place where exceptions and command
results become exit codes. Each command lives in a module of its own (`cpus`, `recommend`,
`watch`, `check`, `stress`, `completion`) that defines a `click.Command` named `command`
and returns an exit status; `app` adds them to the group. Shared pieces: `options` (types
and the options generated from `oversub.core.settings`), `config` (`[tool.oversub]` and the
flag -> key -> default resolver), `output` (the Console and the streams), and for `check`
`progress`, `reports` and `writtenfiles`.

Only click and small modules are imported at start-up: launch scripts run `oversub
recommend ... --format env` on busy machines, so every command imports rich, psutil and
the probes inside its function.
"""
