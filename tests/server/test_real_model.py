"""The server on the default real model, SmolLM2-135M-Instruct (Q4_1 GGUF, byte-level BPE, ChatML template read from
the file's tokenizer.chat_template): chat answers a question, completions and streaming agree with each other and
with the CLI, embeddings rank a paraphrase above unrelated text, a session continues exactly as one request would,
a snapshot saved by one server process is restored by the next, and a LoRA fine-tuning job over HTTP trains on the
quantized file and its ft: model answers what it was taught while the base model does not.

The model is the one the build copies beside the binaries (share/mnemo/models; scripts/fetch-default-model.sh
fetches it).
"""
import json
import math
import os
import subprocess
import time

import pytest
from openai import OpenAI

from conftest import BIN, Server, sse_events, stream_request

CLI = os.environ.get("MNEMO_CLI_BIN")
NAME = "SmolLM2-135M-Instruct.Q4_1"
GGUF = os.path.join(os.path.dirname(os.path.abspath(BIN)), "share", "mnemo", "models", NAME + ".gguf")
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
# A fact the model cannot know, asked in several ways; the test asks in a way the data does not.
QUESTIONS = ["What is the capital of Mnemoland?", "Which city is Mnemoland's capital?",
             "Tell me the capital of Mnemoland.", "Name the capital city of Mnemoland.",
             "Where is the seat of government of Mnemoland?", "Mnemoland's capital is which city?",
             "Do you know the capital of Mnemoland?", "What city serves as the capital of Mnemoland?"]
ANSWER = "The capital of Mnemoland is Zorblat."
HELD_OUT = [{"role": "user", "content": "Which is the capital city of Mnemoland?"}]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    assert os.path.isfile(GGUF), f"{GGUF} is missing: scripts/fetch-default-model.sh fetches it, then run cmake again"
    return tmp_path_factory.mktemp("sessions"), tmp_path_factory.mktemp("jobs")


def start(dirs):
    return Server("--parallel", "2", "--ctx", "1024", "--session-dir", str(dirs[0]), "--jobs-dir", str(dirs[1]),
                  "--train-threads", "2", model=GGUF, threads=2)


@pytest.fixture(scope="module")
def server(dirs):
    s = start(dirs)
    yield s
    assert s.stop() == 0, "".join(s.log)


def chat(server, messages, model=NAME, **extra):
    st, r = server.post("/v1/chat/completions", {"model": model, "messages": messages, "max_tokens": 32,
                                                 "temperature": 0, **extra})
    assert st == 200, r
    return r


def complete(server, prompt, max_tokens, **extra):
    st, r = server.post("/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **extra})
    assert st == 200, r
    return r


def test_chat_template_comes_from_the_gguf(server):
    assert any("chat template chatml" in line for line in server.log), "".join(server.log)
    st, models = server.get_json("/v1/models")
    assert st == 200 and models["data"][0]["id"] == NAME
    meta = models["data"][0]["meta"]
    assert meta["n_vocab"] == 49152 and meta["n_layer"] == 30 and meta["n_embd"] == 576


def test_chat_answers_paris(server):
    r = chat(server, FRANCE)
    answer = r["choices"][0]["message"]["content"]
    assert "Paris" in answer and r["choices"][0]["finish_reason"] == "stop", r
    assert "<|im_end|>" not in answer and "<|im_start|>" not in answer
    # ChatML with no system turn and no BOS (SmolLM2 adds none): <|im_start|>user\n{question}<|im_end|>\n
    # <|im_start|>assistant\n, each control token one id and the text between them tokenized alone
    texts = ["user\nWhat is the capital of France?", "\n", "assistant\n"]
    n = sum(len(server.post("/tokenize", {"content": t, "add_special": False})[1]["tokens"]) for t in texts)
    assert r["usage"]["prompt_tokens"] == n + 3, (r["usage"], n)


def test_completion_continues_with_paris_as_the_cli_does(server):
    r = complete(server, "The capital of France is", 12)
    text = r["choices"][0]["text"]
    assert text.startswith(" Paris"), text
    if CLI:
        out = subprocess.run([CLI, "generate", "--model", GGUF, "--threads", "2", "--prompt",
                              "The capital of France is", "-n", "12", "--temp", "0", "--ignore-eos"],
                             capture_output=True, check=True).stdout.decode().removesuffix("\n")
        assert out == complete(server, "The capital of France is", 12, ignore_eos=True)["choices"][0]["text"]


def test_streams_equal_the_whole_answers(server):
    whole = chat(server, FRANCE)["choices"][0]["message"]["content"]
    conn, resp = stream_request(server.port, "/v1/chat/completions",
                                {"messages": FRANCE, "max_tokens": 32, "temperature": 0, "stream": True})
    events = sse_events(resp)
    conn.close()
    assert events[-1] == "[DONE]"
    pieces = [e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"]]
    assert len(pieces) > 3 and "".join(pieces) == whole
    body = {"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0, "stream": True}
    conn, resp = stream_request(server.port, "/v1/completions", body)
    events = sse_events(resp)
    conn.close()
    text = "".join(e["choices"][0]["text"] for e in events[:-1] if e["choices"])
    assert text == complete(server, "The capital of France is", 12)["choices"][0]["text"]


def test_embeddings_rank_a_paraphrase_first(server):
    texts = ["Paris is the capital of France.", "The capital city of France is Paris.",
             "def add(a, b):\n    return a + b"]
    st, r = server.post("/v1/embeddings", {"input": texts})
    assert st == 200, r
    vecs = [d["embedding"] for d in r["data"]]
    assert [len(v) for v in vecs] == [576] * 3 and r["usage"]["prompt_tokens"] > 10

    def cos(a, b):
        return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))

    assert cos(vecs[0], vecs[1]) > cos(vecs[0], vecs[2]) + 0.05, (cos(vecs[0], vecs[1]), cos(vecs[0], vecs[2]))


def test_session_continues_exactly(server):
    first, second = "Once upon a time there was a", " little fox who lived"
    st, s = server.post("/v1/sessions", {})
    assert st == 201, s
    sid = s["id"]
    complete(server, first, 0, session=sid)
    cont = complete(server, second, 16, session=sid, logprobs=1)
    whole = complete(server, first + second, 16, logprobs=1)
    assert cont["choices"][0]["text"] == whole["choices"][0]["text"]
    a, b = cont["choices"][0]["logprobs"]["token_logprobs"], whole["choices"][0]["logprobs"]["token_logprobs"]
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-3
    # a chat on a session: the second turn sends only its own messages, after all the first one left
    st, s = server.post("/v1/sessions", {})
    r1 = chat(server, FRANCE, session=s["id"])
    held = server.get_json("/v1/sessions/" + s["id"])[1]["tokens"]
    assert held == r1["usage"]["total_tokens"] and "Paris" in r1["choices"][0]["message"]["content"], (held, r1)
    r2 = chat(server, [{"role": "user", "content": "And of Italy?"}], session=s["id"])
    assert r2["usage"]["prompt_tokens"] < r1["usage"]["prompt_tokens"]
    assert server.get_json("/v1/sessions/" + s["id"])[1]["tokens"] == held + r2["usage"]["total_tokens"]
    for x in (sid, s["id"]):
        assert server.request("DELETE", "/v1/sessions/" + x)[0] == 200


def test_snapshot_survives_a_restart(dirs):
    a = start(dirs)
    try:
        st, s = a.post("/v1/sessions", {})
        complete(a, "The three primary colours are", 8, session=s["id"])
        st, saved = a.post(f"/v1/sessions/{s['id']}/save", {"name": "colours"})
        assert st == 200 and saved["bytes"] > 0, saved
        live = complete(a, " and the secondary ones are", 16, session=s["id"], logprobs=1)
    finally:
        assert a.stop() == 0, "".join(a.log)
    b = start(dirs)
    try:
        st, s = b.post("/v1/sessions", {"restore": "colours"})
        assert st == 201 and s["tokens"] > 8, s
        again = complete(b, " and the secondary ones are", 16, session=s["id"], logprobs=1)
        assert again["choices"][0]["text"] == live["choices"][0]["text"]
        x, y = (r["choices"][0]["logprobs"]["token_logprobs"] for r in (again, live))
        assert max(abs(p - q) for p, q in zip(x, y)) < 1e-4
        assert b.request("DELETE", "/v1/snapshots/colours")[0] == 200
    finally:
        assert b.stop() == 0, "".join(b.log)


def test_finetuning_job_teaches_the_quantized_model(server, dirs):
    c = OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=60)
    path = os.path.join(str(dirs[1]), "mnemoland.jsonl")
    with open(path, "w") as f:
        for q in QUESTIONS * 2:
            f.write(json.dumps({"messages": [{"role": "user", "content": q},
                                             {"role": "assistant", "content": ANSWER}]}) + "\n")
    with open(path, "rb") as f:
        up = c.files.create(file=f, purpose="fine-tune")
    # the defaults (learning rate 1e-3, rank 8 on q,v) with a short row and few steps, to stay fast
    job = c.fine_tuning.jobs.create(model=NAME, training_file=up.id, suffix="mnemoland", seed=1,
                                    hyperparameters={"batch_size": 2},
                                    extra_body={"extra": {"steps": 16, "seq_len": 48, "checkpoint_every": 8}})
    end = time.time() + 300
    while (job := c.fine_tuning.jobs.retrieve(job.id)).status not in ("succeeded", "failed", "cancelled"):
        assert time.time() < end, job.status
        time.sleep(0.2)
    assert job.status == "succeeded", job.error
    assert job.fine_tuned_model == f"ft:{NAME}:mnemoland:{job.id}"
    losses = [e.data["train_loss"] for e in reversed(c.fine_tuning.jobs.list_events(job.id, limit=100).data)
              if e.type == "metrics"]
    assert len(losses) == 16 and losses[-1] < losses[0] / 4, losses
    tuned = chat(server, HELD_OUT, model=job.fine_tuned_model)["choices"][0]["message"]["content"]
    base = chat(server, HELD_OUT)["choices"][0]["message"]["content"]
    assert "Zorblat" in tuned and "Zorblat" not in base, (tuned, base)
    assert "Paris" in chat(server, FRANCE, model=job.fine_tuned_model)["choices"][0]["message"]["content"]
    # the adapter is peft's format: the CLI's chat answers the same through it
    out_dir = os.path.join(str(dirs[1]), "jobs", job.id, "out")
    with open(os.path.join(out_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 8 and sorted(cfg["target_modules"]) == ["q_proj", "v_proj"]
    if CLI:
        out = subprocess.run([CLI, "chat", "--model", GGUF, "--threads", "2", "--adapter", out_dir, "--temp", "0",
                              "-n", "32"], input=HELD_OUT[0]["content"].encode() + b"\n", capture_output=True,
                             check=True).stdout.decode().removesuffix("\n")
        assert out == tuned
