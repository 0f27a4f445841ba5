"""The command layer: one module per `specwatch` command (its flags and its run)."""
