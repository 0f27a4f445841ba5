"""The dashboard (Textual): the app composes a live or replay controller, the recording control and
the screens; the widgets under `specwatch.widgets` only render the views it hands them."""
