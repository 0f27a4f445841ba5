"""What the two fuzz harnesses share: their own flags beside atheris' (-atheris_runs=N) ones."""

from __future__ import annotations


def parse_own_flags(argv: list[str], limits: dict[str, float]) -> list[str]:
    """Take `--seconds S` out of argv into limits["seconds"], note `-atheris_runs=N` in
    limits["runs"] (it stays in argv for atheris), and return the rest."""
    rest = []
    it = iter(argv)
    for arg in it:
        if arg == "--seconds":
            limits["seconds"] = float(next(it))
        elif arg.startswith("-atheris_runs="):
            limits["runs"] = int(arg.split("=", 1)[1])
            rest.append(arg)
        else:
            rest.append(arg)
    return rest
