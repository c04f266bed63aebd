"""The project's settings, URLs and servers. Importing it puts the compiled write path, when built
and current, in front of the ``.py`` files (``core.compiled``): every entry point imports ``config``
(``config.settings``, ``config.gunicorn``) before any app."""

from core.compiled import install

install()
