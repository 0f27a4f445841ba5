"""`python -m specwatch`: the same as the `specwatch` command."""

from specwatch.cli import main

raise SystemExit(main())
