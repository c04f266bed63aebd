"""Shared plumbing below every app: no models, imports no app.

errors (domain errors with their HTTP status), http (the retrying HTTP client), api (the
strict JSON parser, the one error shape, JSON 404/500), api_views (the base API view with
declared query parameters, the schema class), serializers (strict fields, label and
plain-text validators), middleware (chunked request bodies), actors (who a request
speaks for, as an audit actor), access (the operator gate), throttling (rate limits
counted in the database), templatetags.
"""
