"""`specwatch predict`: the verdict for a configuration, with no live node."""

from specwatch.predict import add_predict_arguments as add_arguments, run_predict as run

__all__ = ["add_arguments", "run"]
