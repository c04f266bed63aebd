"""The turn view: every flow of one trace id (an agent turn) as one graph (``graph``), its
audited read (``services``), its route (``routes``) and its page (``page``)."""
