"""Seeing a run: the web viewer (``dagagent ui``), the self-contained HTML report
(``dagagent report``) and the text timeline (``dagagent show --timeline``).

A face, like the CLI: it reads runs through :class:`dagagent.store.RunStore` (opened
read-only) and draws them; it changes nothing. The viewer needs the ``ui`` extra
(``pip install "dagagent[ui]"``: Starlette, uvicorn, Jinja2); the text timeline needs nothing.

- :mod:`.view`: what is shown, as plain data (:class:`RunView`, from :func:`build_view`):
  the DAG laid out by level (:mod:`._dag`), the timeline's bars and waits (:mod:`._bars`),
  the critical path, the limits for big runs; :mod:`._labels` the words they share;
- :mod:`.timeline`: the timeline as text;
- :mod:`.render`: the pages as HTML (Jinja2, autoescaped), the report;
- :mod:`.app`: the Starlette app (:func:`~dagagent.ui.app.create_app`); ``dagagent ui`` serves
  it with uvicorn.
"""

from __future__ import annotations

from .timeline import timeline_text
from .view import RunView, build_view

__all__ = ["RunView", "build_view", "timeline_text"]
