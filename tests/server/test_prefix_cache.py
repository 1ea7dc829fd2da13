"""Prefix reuse: a second request that shares a long prefix with the first decodes only the rest, reports the rest
of its prompt as cached in usage.prompt_tokens_details.cached_tokens, and answers exactly what a fresh server
answers; --cache-ram bounds the memory idle slots keep (0: a LongLLaMA slot forgets its memory when it goes idle)."""
import os

from conftest import FIXTURES, Server

LONGLLAMA = os.path.join(FIXTURES, "longllama", "basic")
DOC = " ".join(f"line {i}: the king of denmark speaks to the ghost of his father." for i in range(40))
SHORT = DOC[:150]  # the plain fixture's context is 128 tokens


def complete(srv, prompt, n=8):
    st, r = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0})
    assert st == 200, r
    return r["choices"][0]["text"], r["usage"]


def fresh_answer(prompt, model=None, n=8):
    kw = {"model": model} if model else {}
    srv = Server("--parallel", "1", **kw)
    try:
        return complete(srv, prompt, n)[0]
    finally:
        srv.stop()


def run_pair(doc, model=None):
    kw = {"model": model} if model else {}
    srv = Server("--parallel", "2", **kw)
    try:
        _, u1 = complete(srv, doc + " Question: who speaks?")
        text2, u2 = complete(srv, doc + " Question: to whom?")
        metrics = srv.metrics()
    finally:
        srv.stop()
    return u1, text2, u2, metrics


def test_plain_model_reuses_the_prefix():
    u1, text2, u2, m = run_pair(SHORT)
    assert u1["prompt_tokens_details"]["cached_tokens"] == 0
    cached = u2["prompt_tokens_details"]["cached_tokens"]
    assert u2["prompt_tokens"] - 12 < cached < u2["prompt_tokens"], u2  # all but the differing question
    assert m["mnemo_prompt_tokens_cached_total"] == cached
    assert text2 == fresh_answer(SHORT + " Question: to whom?")


def test_longllama_reuses_its_memory():
    u1, text2, u2, m = run_pair(DOC, LONGLLAMA)
    cached = u2["prompt_tokens_details"]["cached_tokens"]
    assert u2["prompt_tokens"] > 500 and cached > u2["prompt_tokens"] - 80, u2  # back at most one window (64)
    assert text2 == fresh_answer(DOC + " Question: to whom?", LONGLLAMA)


def test_cache_ram_zero_frees_an_idle_slots_memory():
    srv = Server("--parallel", "1", "--cache-ram", "0", model=LONGLLAMA)
    try:
        complete(srv, DOC)
        m = srv.metrics()
        assert m["mnemo_memory_tokens"] == 0
        assert m['mnemo_memory_bytes{kind="memory_keys"}'] == 0
        _, u = complete(srv, DOC + " more")
        assert u["prompt_tokens_details"]["cached_tokens"] == 0
    finally:
        srv.stop()
