"""OpenInference (Arize Phoenix's instrumentations): ``openinference.span.kind``, ``llm.*``, ``tool.*``.

Names come from the ``openinference-semantic-conventions`` package. Content: ``input.value`` /
``output.value``, the flattened message families ``llm.input_messages.*`` /
``llm.output_messages.*``, prompts and templates, invocation parameters, tool definitions and
calls, retrieved and reranked documents, embeddings, metadata and tags.
"""

from __future__ import annotations

from openinference.semconv.trace import OpenInferenceSpanKindValues, RerankerAttributes, SpanAttributes

from reasoning.recording.conventions.base import AGENT, EMBEDDING, LLM, RERANK, RETRIEVAL, TOOL, Convention

S = SpanAttributes
K = OpenInferenceSpanKindValues

KINDS = {
    K.LLM.value.lower(): LLM,
    K.TOOL.value.lower(): TOOL,
    K.AGENT.value.lower(): AGENT,
    K.CHAIN.value.lower(): "chain",
    K.RETRIEVER.value.lower(): RETRIEVAL,
    K.EMBEDDING.value.lower(): EMBEDDING,
    K.RERANKER.value.lower(): RERANK,
    K.GUARDRAIL.value.lower(): "guardrail",
    K.EVALUATOR.value.lower(): "evaluation",
    K.PROMPT.value.lower(): "prompt",
    K.UNKNOWN.value.lower(): "span",
}
# Decision spans are new in the package: take them when it has them.
if hasattr(K, "DECISION"):
    KINDS[K.DECISION.value.lower()] = "decision"


def _family(name: str) -> str:
    return f"{name}."


CONVENTION = Convention(
    name="OpenInference",
    kinds={S.OPENINFERENCE_SPAN_KIND: KINDS},
    model=(
        S.LLM_RESPONSE_MODEL_NAME,
        S.LLM_MODEL_NAME,
        S.LLM_REQUEST_MODEL_NAME,
        S.EMBEDDING_MODEL_NAME,
        RerankerAttributes.RERANKER_MODEL_NAME,
    ),
    input_tokens=(S.LLM_TOKEN_COUNT_PROMPT,),
    output_tokens=(S.LLM_TOKEN_COUNT_COMPLETION,),
    reasoning_tokens=(S.LLM_TOKEN_COUNT_COMPLETION_DETAILS_REASONING,),
    cached_tokens=(S.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_READ,),
    tool=(S.TOOL_NAME,),
    agent=(S.AGENT_NAME,),
    session=(S.SESSION_ID,),
    user=(S.USER_ID,),
    clear=frozenset(
        {
            S.OPENINFERENCE_SPAN_KIND,
            S.LLM_MODEL_NAME,
            S.LLM_REQUEST_MODEL_NAME,
            S.LLM_RESPONSE_MODEL_NAME,
            S.LLM_PROVIDER,
            S.LLM_SYSTEM,
            S.LLM_FINISH_REASON,
            S.EMBEDDING_MODEL_NAME,
            S.TOOL_NAME,
            S.TOOL_ID,
            S.AGENT_NAME,
            S.SESSION_ID,
            S.INPUT_MIME_TYPE,
            S.OUTPUT_MIME_TYPE,
            S.GRAPH_NODE_ID,
            S.GRAPH_NODE_NAME,
            S.GRAPH_NODE_PARENT_ID,
            S.PROMPT_ID,
            S.PROMPT_VENDOR,
            RerankerAttributes.RERANKER_MODEL_NAME,
            RerankerAttributes.RERANKER_TOP_K,
        }
    ),
    # Token counts and costs: numbers only (is_clear refuses anything else under a prefix).
    clear_prefixes=("llm.token_count.", "llm.cost."),
    inputs=(
        S.INPUT_VALUE,
        _family(S.LLM_INPUT_MESSAGES),
        _family(S.LLM_PROMPTS),
        S.LLM_PROMPTS,
        "llm.prompt_template.",
        S.LLM_INVOCATION_PARAMETERS,
        S.EMBEDDING_INVOCATION_PARAMETERS,
        _family(S.LLM_TOOLS),
        S.TOOL_DESCRIPTION,
        S.TOOL_PARAMETERS,
        _family(S.EMBEDDING_EMBEDDINGS),
        _family(S.INPUT_DOCUMENTS),
        _family(RerankerAttributes.RERANKER_INPUT_DOCUMENTS),
        RerankerAttributes.RERANKER_QUERY,
        _family(S.INPUT_IMAGES),
        S.METADATA,
        _family(S.METADATA),
        S.TAG_TAGS,
        S.USER_ID,
    ),
    outputs=(
        S.OUTPUT_VALUE,
        _family(S.LLM_OUTPUT_MESSAGES),
        _family(S.LLM_CHOICES),
        S.LLM_FUNCTION_CALL,
        _family(S.RETRIEVAL_DOCUMENTS),
        _family(S.OUTPUT_DOCUMENTS),
        _family(RerankerAttributes.RERANKER_OUTPUT_DOCUMENTS),
        _family(S.OUTPUT_IMAGES),
        _family("tool_call"),
        _family(S.EVALUATIONS),
    ),
)
