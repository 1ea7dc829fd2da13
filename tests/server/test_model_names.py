"""Model names as clients send them: the served model's aliases (--alias, repeatable; --served-model-name), names
written for OpenAI ("gpt-4o-mini") served by the one base model unless --model-name-strict, and a response that
names what was asked for."""
import pytest
from openai import NotFoundError, OpenAI

from conftest import Server


@pytest.fixture(scope="module")
def srv():
    s = Server("--alias", "tiny", "--served-model-name", "tiny-2")
    yield s
    assert s.stop() == 0, "".join(s.log)


def test_openai_names_are_served_by_the_base_model(srv):
    client = OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0)
    r = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=3, temperature=0)
    assert r.model == "tiny" and r.choices[0].message.content is not None
    r = client.completions.create(model="gpt-3.5-turbo-instruct", prompt="To be", max_tokens=3, temperature=0)
    assert r.model == "tiny"
    st, body = srv.post("/v1/embeddings", {"model": "text-embedding-3-small", "input": "a"})
    assert st == 200 and body["model"] == "tiny"


def test_every_alias_is_listed_and_named_back(srv):
    st, body = srv.get_json("/v1/models")
    assert [m["id"] for m in body["data"]] == ["tiny", "tiny-2"]
    assert srv.get_json("/v1/models/tiny-2")[0] == 200
    st, body = srv.post("/v1/completions", {"model": "tiny-2", "prompt": "To be", "max_tokens": 2})
    assert st == 200 and body["model"] == "tiny-2"
    st, body = srv.post("/completion", {"model": "tiny-2", "prompt": "To be", "n_predict": 2})
    assert st == 200 and body["model"] == "tiny-2"
    assert srv.get_json("/v1/models/gpt-4")[0] == 404  # a listing names only what exists


def test_a_fine_tuned_name_is_never_served_by_the_base(srv):
    st, body = srv.post("/v1/completions", {"model": "ft:tiny:x:ftjob-0", "prompt": "a"})
    assert st == 404 and body["error"]["code"] == "model_not_found"


def test_strict_names():
    s = Server("--model-name-strict")
    try:
        client = OpenAI(base_url=s.base + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(NotFoundError, match="model-name-strict"):
            client.completions.create(model="gpt-4", prompt="a", max_tokens=1)
        assert client.completions.create(model="mha", prompt="a", max_tokens=1).model == "mha"
    finally:
        assert s.stop() == 0
