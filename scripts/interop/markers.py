"""Marker strings planted in every piece of content the interop scenarios send.

The scenarios put them in system prompts, prompts, tool arguments and tool results; the fake
model server puts them in answers and reasoning. After a replay the tests look for each one
in every table's plaintext and every log line: none may appear. Imported by the capture
scripts (in throw-away virtualenvs, stdlib only) and by the tests.
"""

SYSTEM = "zq7-system-prompt-marker"
PROMPT = "zq7-user-prompt-marker"
ANSWER = "zq7-model-answer-marker"
STREAMED = "zq7-streamed-answer-marker"
TOOL_ARGUMENT = "zq7-tool-argument-marker"
TOOL_RESULT = "zq7-tool-result-marker"
REASONING = "zq7-model-reasoning-marker"
TOOL_ERROR = "zq7-tool-error-marker"
EMBEDDED = "zq7-embedding-input-marker"
# A prompt containing this makes the fake server answer 500.
FAIL = "zq7-please-fail-marker"

ALL = (SYSTEM, PROMPT, ANSWER, STREAMED, TOOL_ARGUMENT, TOOL_RESULT, REASONING, TOOL_ERROR, EMBEDDED, FAIL)

# What the fake server reports for every non-streamed completion (streamed: the same usage in
# the last chunk when the client asks for it with stream_options.include_usage).
PROMPT_TOKENS = 21
COMPLETION_TOKENS = 34
REASONING_TOKENS = 13
CACHED_TOKENS = 5
MODEL = "gpt-4o-mini"
RESPONSE_MODEL = "gpt-4o-mini-2024-07-18"
