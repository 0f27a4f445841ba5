"""The `specwatch` commands: one module per command, each with `add_arguments(parser)` and
`run(args) -> int`; the flags and helpers they share are in `options`. `specwatch.cli` builds the
parser and imports a command's module only to run it."""
