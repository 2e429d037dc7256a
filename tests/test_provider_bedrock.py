"""Bedrock embeddings as OpenClaw 2026.9.6's amazon-bedrock plugin sends them, against a real
HTTP double (tests/fakes/bedrock_double.py) that authenticates every request as AWS does: it
recomputes the SigV4 signature with the key's secret and refuses a wrong one with AWS's 403.

The signer itself is first checked against AWS's published example, so the double and memq
cannot agree on a wrong signature. Secrets are the suite's sentinel (tests/secrets_scan.py):
the session-end scan fails the run if one reaches output, a log or a store.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline.embeddings.aws_sigv4 import AwsCredentials, canonical_request, find_credentials, sign
from pipeline.embeddings.bedrock import BedrockProvider, bedrock_endpoint, bedrock_region
from pipeline.embeddings.registry import build_from_spec, choose_provider
from pipeline.errors import (
    MissingApiKey,
    ProviderRefused,
    ProviderRetryable,
    ProviderThrottled,
    ProviderUnavailable,
)
from tests.conftest import REPO
from tests.fakes.bedrock_double import BedrockDouble, Fault, TemporaryKey
from tests.secrets_scan import SENTINEL
from tests.test_fleet import memq_argv
from tests.test_provider_ids import settings_of

KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SECRET = SENTINEL  # the AWS secret access key
SESSION = f"IQoJb3JpZ2luX2VjE{SENTINEL}"  # a session token
BEARER = f"ABSK{SENTINEL}"  # a Bedrock API key
DOCS = ["the billing service runs on PostgreSQL 16", "deploys happen on Tuesdays"]
NO_FILES = {"HOME": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/credentials",
            "AWS_CONFIG_FILE": "/nonexistent/config"}


def aws_env(double: BedrockDouble, **extra: str) -> dict[str, str]:
    return {**NO_FILES, "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": double.url, **extra}


def provider(double: BedrockDouble, model: str | None = None, **kwargs: Any) -> BedrockProvider:
    env = kwargs.pop("env", None) or aws_env(double)
    return BedrockProvider(model, endpoint=double.url, env=env, **kwargs)


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


# -- the signer -------------------------------------------------------------------------------

def test_sigv4_matches_aws_published_example() -> None:
    """AWS's "Create a signed AWS API request" example (IAM ListUsers, 2015-08-30): the
    canonical request's hash and the signature it documents."""
    import hashlib

    headers = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
               "Host": "iam.amazonaws.com", "X-Amz-Date": "20150830T123600Z"}
    names = ["content-type", "host", "x-amz-date"]
    canonical = canonical_request("GET", "/", "Action=ListUsers&Version=2010-05-08", headers,
                                  names, hashlib.sha256(b"").hexdigest())
    assert hashlib.sha256(canonical.encode()).hexdigest() == \
        "f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59"
    signed = sign("GET", "https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08",
                  {"Content-Type": headers["Content-Type"]}, b"",
                  credentials=AwsCredentials("AKIDEXAMPLE",
                                             "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
                  region="us-east-1", service="iam",
                  now=datetime(2015, 8, 30, 12, 36, tzinfo=UTC))
    assert signed["Authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, "
        "SignedHeaders=content-type;host;x-amz-date, "
        "Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7")


def test_credentials_never_show_their_secrets() -> None:
    creds = AwsCredentials(KEY_ID, SECRET, SESSION)
    assert SENTINEL not in repr(creds) and KEY_ID in repr(creds)


# -- on the wire ------------------------------------------------------------------------------

def test_titan_v2_is_signed_and_sent_as_openclaw_sends_it() -> None:
    with BedrockDouble(keys={KEY_ID: SECRET}) as double:
        p = provider(double)
        docs = p.embed_documents(DOCS)
        query = p.embed_query("which database?")
        sent = double.invocations()
        assert [r.status for r in sent] == [200, 200, 200]  # one request per text
        assert {r.path for r in sent} == {"/model/amazon.titan-embed-text-v2%3A0/invoke"}
        assert sorted((r.body for r in sent), key=json.dumps) == sorted(
            ({"inputText": t, "dimensions": 1024, "normalize": True}
             for t in [*DOCS, "which database?"]), key=json.dumps)  # (documents in parallel)
        headers = sent[0].headers
        assert headers["content-type"] == headers["accept"] == "application/json"
        assert headers["authorization"].startswith(
            f"AWS4-HMAC-SHA256 Credential={KEY_ID}/{headers['x-amz-date'][:8]}/us-east-1/"
            "bedrock/aws4_request, SignedHeaders=accept;content-type;host;x-amz-date, ")
        assert "x-amz-security-token" not in headers
        for got, text in zip(docs, DOCS, strict=True):
            np.testing.assert_allclose(got, unit(double.vector(p.model, text, 1024)), atol=1e-6)
        assert query.shape == (1024,) and p.dims == 1024


@pytest.mark.parametrize(("model", "configured", "dims", "body"), [
    ("amazon.titan-embed-text-v1", None, 1536, lambda t, kind: {"inputText": t[0]}),
    ("amazon.titan-embed-text-v2:0", 256, 256,
     lambda t, kind: {"inputText": t[0], "dimensions": 256, "normalize": True}),
    ("cohere.embed-english-v3", None, 1024,
     lambda t, kind: {"texts": t, "input_type": f"search_{kind}", "truncate": "END"}),
    ("cohere.embed-v4:0", 512, 512,
     lambda t, kind: {"texts": t, "input_type": f"search_{kind}", "truncate": "END",
                      "embedding_types": ["float"], "output_dimension": 512}),
    ("amazon.nova-2-multimodal-embeddings-v1:0", 384, 384,
     lambda t, kind: {"taskType": "SINGLE_EMBEDDING", "singleEmbeddingParams": {
         "embeddingPurpose": "GENERIC_INDEX", "embeddingDimension": 384,
         "text": {"truncationMode": "END", "value": t[0]}}}),
    ("twelvelabs.marengo-embed-3-0-v1:0", None, 512,
     lambda t, kind: {"inputType": "text", "text": {"inputText": t[0]}}),
    ("us.cohere.embed-multilingual-v3", None, 1024,
     lambda t, kind: {"texts": t, "input_type": f"search_{kind}", "truncate": "END"}),
])
def test_each_model_family_has_its_body_and_answer(model: str, configured: int | None,
                                                   dims: int, body: Any) -> None:
    with BedrockDouble(keys={KEY_ID: SECRET}) as double:
        p = provider(double, f"bedrock/{model}", dimensions=configured)
        assert p.model == model  # the bedrock/ prefix goes, as in OpenClaw
        docs = p.embed_documents(DOCS)
        query = p.embed_query("which database?")
        assert docs.shape == (2, dims) and query.shape == (dims,)
        sent = [r.body for r in double.invocations()]
        if "cohere" in model:  # the documents in one request, then the query
            assert sent == [body(DOCS, "document"), body(["which database?"], "query")]
        else:
            assert sorted(sent, key=json.dumps) == sorted(
                (body([t], None) for t in [*DOCS, "which database?"]), key=json.dumps)
        bare = model.removeprefix("us.")
        np.testing.assert_allclose(docs[1], unit(double.vector(bare, DOCS[1], dims)), atol=1e-6)


def test_output_dimensionality_is_checked_against_the_model() -> None:
    with BedrockDouble(keys={KEY_ID: SECRET}) as double, \
            pytest.raises(ProviderUnavailable, match=re.escape(
                "Invalid dimensions 768 for amazon.titan-embed-text-v2:0. Valid values: "
                "256, 512, 1024")):
        provider(double, dimensions=768)


def test_temporary_credentials_send_their_session_token_and_an_expired_one_is_refused() -> None:
    temporary = TemporaryKey(SECRET, SESSION)
    with BedrockDouble(keys={KEY_ID: temporary}) as double:
        p = provider(double, env=aws_env(double, AWS_SESSION_TOKEN=SESSION))
        p.embed_query("hello")
        headers = double.invocations()[0].headers
        assert headers["x-amz-security-token"] == SESSION
        assert "x-amz-security-token" in headers["authorization"].split("SignedHeaders=")[1]
        double.keys[KEY_ID] = TemporaryKey(SECRET, SESSION, expired=True)
        with pytest.raises(ProviderRefused, match="security token included in the request is "
                                                  "expired") as caught:
            p.embed_query("hello")
        without = provider(double)  # the token left out
        with pytest.raises(ProviderRefused, match=r"security token .* is invalid"):
            without.embed_query("hello")
    assert SENTINEL not in str(caught.value)


@pytest.mark.parametrize(("env", "says"), [
    ({"AWS_SECRET_ACCESS_KEY": "not-the-secret"}, "signature we calculated does not match"),
    ({"AWS_ACCESS_KEY_ID": "AKIAUNKNOWN000000000"}, "security token included in the request "
                                                    "is invalid"),
    ({"AWS_REGION": "eu-west-1"}, "Credential should be scoped to a valid region"),
])
def test_a_wrong_signature_is_refused_with_403(env: dict[str, str], says: str) -> None:
    with BedrockDouble(keys={KEY_ID: SECRET}) as double:
        full = aws_env(double, **env)
        p = provider(double, env=full, region=bedrock_region(None, full))
        with pytest.raises(ProviderRefused) as caught:
            p.embed_query("hello")
        assert says in str(caught.value) and "HTTP 403" in str(caught.value)
        assert "AWS credentials" in str(caught.value)
        assert [r.status for r in double.invocations()] == [403]  # not retried
    assert SENTINEL not in str(caught.value)


def test_the_signature_covers_the_body() -> None:
    """A body changed after signing (a proxy rewriting it) is refused."""
    with BedrockDouble(keys={KEY_ID: SECRET}) as double:
        p = provider(double)
        original = p._signer

        def tampering(auth: Any) -> Any:
            signer = original(auth)
            return lambda url, payload: signer(url, payload.replace(b"alpha", b"omega"))

        p._signer = tampering  # type: ignore[method-assign]
        with pytest.raises(ProviderRefused, match="signature we calculated does not match"):
            p.embed_query("alpha")


def test_a_bedrock_api_key_is_sent_as_bearer_and_preferred() -> None:
    with BedrockDouble(keys={}, bearer_tokens=(BEARER,)) as double:
        p = provider(double, env=aws_env(double, AWS_BEARER_TOKEN_BEDROCK=BEARER))
        p.embed_query("hello")
        assert double.invocations()[0].headers["authorization"] == f"Bearer {BEARER}"
        assert "x-amz-date" not in double.invocations()[0].headers
        wrong = provider(double, env=aws_env(double, AWS_BEARER_TOKEN_BEDROCK="ABSKwrong"))
        with pytest.raises(ProviderRefused, match="API Key is valid") as caught:
            wrong.embed_query("hello")
    assert SENTINEL not in str(caught.value)


@pytest.mark.parametrize(("fault", "error"), [("429", ProviderThrottled),
                                              ("500", ProviderRetryable),
                                              ("503", ProviderRetryable)])
def test_throttling_and_server_errors_are_retryable(fault: str, error: type) -> None:
    with BedrockDouble(keys={KEY_ID: SECRET}, script=[Fault(fault)]) as double:
        p = provider(double)
        with pytest.raises(error) as caught:
            p.embed_query("hello")
        assert f"HTTP {fault}" in str(caught.value)
        assert p.embed_query("hello").shape == (1024,)  # the next attempt goes through


def test_a_dead_endpoint_is_retryable() -> None:
    p = BedrockProvider(None, endpoint="http://127.0.0.1:9",
                        env={**NO_FILES, "AWS_ACCESS_KEY_ID": KEY_ID,
                             "AWS_SECRET_ACCESS_KEY": SECRET}, timeout=2)
    with pytest.raises(ProviderRetryable, match="connection error"):
        p.embed_query("hello")


# -- credentials, region, endpoint -------------------------------------------------------------

def test_no_credentials_is_missing_api_key_with_openclaw_message() -> None:
    with pytest.raises(MissingApiKey, match=re.escape(
            'No API key found for provider "bedrock". AWS credentials are not available')):
        BedrockProvider(None, env=dict(NO_FILES))


def test_a_profile_of_the_shared_files_is_read(tmp_path: Path) -> None:
    creds = tmp_path / "credentials"
    creds.write_text(f"[default]\naws_access_key_id = AKIAOTHER\naws_secret_access_key = x\n\n"
                     f"[work]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\n"
                     f"aws_session_token = {SESSION}\n")
    config = tmp_path / "config"
    config.write_text(f"[profile cfg]\naws_access_key_id = {KEY_ID}\n"
                      f"aws_secret_access_key = {SECRET}\n")
    files = {"AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_CONFIG_FILE": str(config),
             "HOME": str(tmp_path)}
    found = find_credentials({**files, "AWS_PROFILE": "work", "AWS_ACCESS_KEY_ID": "AKIAENV",
                              "AWS_SECRET_ACCESS_KEY": "env"})  # AWS_PROFILE wins over env keys
    assert (found.access_key_id, found.session_token) == (KEY_ID, SESSION)
    assert find_credentials({**files}).access_key_id == "AKIAOTHER"
    assert find_credentials({**files, "AWS_PROFILE": "cfg"}).access_key_id == KEY_ID
    assert find_credentials({**files, "AWS_PROFILE": "nope"}) is None
    with BedrockDouble(keys={KEY_ID: TemporaryKey(SECRET, SESSION)}) as double:
        p = provider(double, env={**files, "AWS_PROFILE": "work"})
        assert p.embed_query("hello").shape == (1024,)


def test_region_and_endpoint_are_resolved_as_openclaw_and_the_aws_sdk_do() -> None:
    env = {"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "ap-south-1"}
    assert bedrock_region("https://bedrock-runtime.us-west-2.amazonaws.com", env) == "us-west-2"
    assert bedrock_region("https://example.com", env) == "eu-west-1"
    assert bedrock_region(None, {"AWS_DEFAULT_REGION": "ap-south-1"}) == "ap-south-1"
    assert bedrock_region(None, {}) == "us-east-1"
    assert bedrock_endpoint("eu-west-1", {}) == "https://bedrock-runtime.eu-west-1.amazonaws.com"
    assert bedrock_endpoint("eu-west-1", {"AWS_ENDPOINT_URL": "http://a/"}) == "http://a"
    assert bedrock_endpoint("x", {"AWS_ENDPOINT_URL": "http://a",
                                  "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": "http://b"}) == "http://b"


# -- the registry: chosen from the config, rebuilt by a worker -----------------------------------

def test_the_configured_provider_is_built_and_a_worker_rebuilds_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with BedrockDouble(keys={KEY_ID: SECRET}, region="us-west-2") as double:
        settings = settings_of(tmp_path, {
            "provider": "bedrock", "model": "amazon.titan-embed-text-v2:0",
            "outputDimensionality": 512,
            "remote": {"baseUrl": "https://bedrock-runtime.us-west-2.amazonaws.com"}})
        env = aws_env(double)
        choice = choose_provider(settings, env=env)
        assert choice.provider is not None and choice.spec is not None
        assert choice.spec.name == "bedrock"
        assert choice.spec.options["region"] == "us-west-2"
        assert choice.spec.options["dimensions"] == 512
        assert SENTINEL not in json.dumps(choice.spec.to_dict())
        assert choice.provider.embed_query("hello").shape == (512,)
        # A worker without the remote.baseUrl signs for the job's region all the same.
        plain = settings_of(tmp_path / "worker", {"provider": "bedrock"})
        for name, value in env.items():  # (a worker reads its own environment)
            monkeypatch.setenv(name, value)
        rebuilt = build_from_spec(choice.spec, plain)
        assert rebuilt.provider_key == choice.spec.provider_key
        assert rebuilt.embed_query("hello").shape == (512,)


def test_without_credentials_the_fallback_takes_over(tmp_path: Path) -> None:
    settings = settings_of(tmp_path, {"provider": "bedrock", "fallback": "none"})
    with pytest.raises(MissingApiKey, match="AWS credentials are not available"):
        choose_provider(settings, env=dict(NO_FILES))


def test_memq_index_and_search_with_bedrock_through_the_cli(tmp_path: Path) -> None:
    """The first embedding no longer fails: ``memq index`` then a hybrid ``memq search``, the
    secret key never in their output or the store (the session-end scan checks the files)."""
    with BedrockDouble(keys={KEY_ID: SECRET}) as double:
        ws = tmp_path / "ws"
        (ws / "memory").mkdir(parents=True)
        (ws / "MEMORY.md").write_text("# Vault\n\nThe vault is named kestrel-bedrock.\n\n"
                                      "Lunch is at noon.\n")
        config = tmp_path / "openclaw.json"
        config.write_text(json.dumps({"agents": {"list": [{
            "id": "main", "workspace": str(ws),
            "memorySearch": {"provider": "bedrock",
                             "store": {"path": str(tmp_path / "store.sqlite")}}}]}}))
        env = {**os.environ, **aws_env(double), "MEMQ_CONFIG": str(config),
               "MEMQ_HOME": str(tmp_path / "home")}
        env.pop("HOME")
        env["HOME"] = str(tmp_path / "home")

        def memq(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(memq_argv(*args), env=env, capture_output=True, text=True,
                                  timeout=300, cwd=REPO)

        done = memq("index", "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        found = memq("search", "--json", "kestrel-bedrock vault")
        assert found.returncode == 0, found.stderr
        answer = json.loads(found.stdout)
        assert answer["mode"] == "hybrid" and answer["provider"] == "bedrock", answer
        assert "kestrel-bedrock" in answer["results"][0]["snippet"]
        assert all(r.status == 200 for r in double.invocations())
        for text in (done.stdout, done.stderr, found.stdout, found.stderr):
            assert SENTINEL not in text
