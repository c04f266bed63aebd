"""The turn view: every flow of one trace id (an agent turn) as one graph (``graph``), its route
(``routes``); the page is in ``reasoning.views``."""
