/*
 * test_config.c — model_config_parse/load: the committed fixture configs (MHA, GQA, linear RoPE scaling),
 * the LongLLaMA-3B config (syzymon/long_llama_3b's config.json), defaults, model_type fallback, eos lists,
 * transformers-5 rope_parameters; then bad configs, each with the message substring it must produce
 * ("not supported" for unsupported features, which the API maps to MNEMO_ERR_UNSUPPORTED).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model_config.h"
#include "test_util.h"

/* The LongLLaMA-3B config.json (values from the spec's table; fields as the HF release has them). */
static const char *longllama_3b =
    "{\n"
    "  \"architectures\": [\"LongLlamaForCausalLM\"],\n"
    "  \"auto_map\": {\"AutoConfig\": \"configuration_longllama.LongLlamaConfig\",\n"
    "               \"AutoModelForCausalLM\": \"modeling_longllama.LongLlamaForCausalLM\"},\n"
    "  \"bos_token_id\": 1, \"eos_token_id\": 2, \"pad_token_id\": 0,\n"
    "  \"hidden_act\": \"silu\", \"hidden_size\": 3200, \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 8640, \"last_context_length\": 1024, \"max_position_embeddings\": 2048,\n"
    "  \"mem_attention_grouping\": null, \"mem_dtype\": \"bfloat16\", \"mem_layers\": [6, 12, 18],\n"
    "  \"mem_positionals\": true, \"model_type\": \"longllama\", \"num_attention_heads\": 32,\n"
    "  \"num_hidden_layers\": 26, \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 10000,\n"
    "  \"tie_word_embeddings\": false, \"torch_attention\": false, \"gradient_checkpoint_every_ith\": 1,\n"
    "  \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.30.0\", \"use_cache\": true,\n"
    "  \"vocab_size\": 32000\n"
    "}\n";

#define BASE "\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, " \
             "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100"

static int parse(const char *json, model_config *c, char *err, size_t errlen) {
    return model_config_parse(json, strlen(json), "config.json", c, err, errlen);
}

static void test_fixture_configs(void) {
    char dir[1024], err[512] = "";
    model_config c;
    snprintf(dir, sizeof dir, "%s/models/mha", test_fixtures());
    CHECK(model_config_load(dir, &c, err, sizeof err) == 0, "mha: %s", err);
    CHECK(strcmp(c.architecture, "LlamaForCausalLM") == 0 && !c.is_longllama && c.hidden_size == 64 &&
              c.num_attention_heads == 4 && c.num_key_value_heads == 4 && c.head_dim == 16 && c.vocab_size == 512 &&
              c.intermediate_size == 88 && c.num_hidden_layers == 2 && c.max_position_embeddings == 128,
          "mha: fields");
    CHECK(fabsf(c.rms_norm_eps - 1e-5f) < 1e-12f && c.rope_theta == 10000.0f && c.rope_scaling == ROPE_SCALING_NONE &&
              c.rope_scaling_factor == 1.0f && c.pad_token_id == -1 && c.n_eos == 1 && c.eos_token_ids[0] == 2 &&
              strcmp(c.torch_dtype, "float32") == 0,
          "mha: eps/rope/tokens");

    snprintf(dir, sizeof dir, "%s/models/gqa", test_fixtures());
    CHECK(model_config_load(dir, &c, err, sizeof err) == 0, "gqa: %s", err);
    CHECK(c.num_key_value_heads < c.num_attention_heads && c.num_attention_heads % c.num_key_value_heads == 0,
          "gqa: heads %d/%d", c.num_attention_heads, c.num_key_value_heads);

    snprintf(dir, sizeof dir, "%s/models/rope_scaled", test_fixtures());
    CHECK(model_config_load(dir, &c, err, sizeof err) == 0, "rope_scaled: %s", err);
    CHECK(c.rope_scaling == ROPE_SCALING_LINEAR && c.rope_scaling_factor == 2.0f && c.rope_theta == 500000.0f,
          "rope_scaled: %d %g %g", c.rope_scaling, c.rope_scaling_factor, c.rope_theta);

    snprintf(dir, sizeof dir, "%s/models/tied", test_fixtures());
    CHECK(model_config_load(dir, &c, err, sizeof err) == 0 && c.tie_word_embeddings, "tied: %s", err);

    CHECK(model_config_load("/nonexistent/dir", &c, err, sizeof err) == -1 &&
              strstr(err, "/nonexistent/dir/config.json: cannot open"),
          "missing: '%s'", err);
}

static void test_valid(void) {
    char err[512] = "";
    model_config c;
    CHECK(parse(longllama_3b, &c, err, sizeof err) == 0, "longllama: %s", err);
    CHECK(c.is_longllama && strcmp(c.architecture, "LongLlamaForCausalLM") == 0 && c.hidden_size == 3200 &&
              c.head_dim == 100 && c.num_key_value_heads == 32 && c.num_hidden_layers == 26 &&
              c.intermediate_size == 8640 && c.vocab_size == 32000 && c.pad_token_id == 0 && c.bos_token_id == 1,
          "longllama: sizes");
    CHECK(c.n_mem_layers == 3 && c.mem_layers[0] == 6 && c.mem_layers[1] == 12 && c.mem_layers[2] == 18 &&
              c.mem_dtype == KERN_BF16 && c.last_context_length == 1024 && c.mem_attention_grouping[0] == 0 &&
              c.mem_positionals && fabsf(c.rms_norm_eps - 1e-6f) < 1e-12f && strcmp(c.torch_dtype, "bfloat16") == 0,
          "longllama: memory fields");

    /* defaults */
    CHECK(parse("{" BASE "}", &c, err, sizeof err) == 0, "minimal: %s", err);
    CHECK(c.head_dim == 16 && c.num_key_value_heads == 4 && c.rms_norm_eps == 1e-6f && c.rope_theta == 10000.0f &&
              c.max_position_embeddings == 2048 && !c.tie_word_embeddings && c.bos_token_id == 1 && c.n_eos == 1 &&
              c.eos_token_ids[0] == 2 && c.pad_token_id == -1 && c.torch_dtype[0] == '\0' && c.n_mem_layers == 0 &&
              c.mem_dtype == KERN_BF16 && c.last_context_length == 1024 && c.mem_positionals && !c.qk_norm,
          "minimal: defaults");
    CHECK(parse("{" BASE ", \"qk_norm\": true}", &c, err, sizeof err) == 0 && c.qk_norm, "qk_norm: %s", err);

    CHECK(parse("{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
                " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 32, \"vocab_size\": 100,"
                " \"eos_token_id\": [2, 7, 9], \"pad_token_id\": -1, \"rms_norm_eps\": 1, \"rope_theta\": 5e5,"
                " \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 4}, \"tie_word_embeddings\": true,"
                " \"dtype\": \"float16\", \"bos_token_id\": null}",
                &c, err, sizeof err) == 0,
          "gqa+model_type: %s", err);
    CHECK(strcmp(c.architecture, "LlamaForCausalLM") == 0 && c.num_key_value_heads == 2 && c.head_dim == 32 &&
              c.n_eos == 3 && c.eos_token_ids[2] == 9 && c.pad_token_id == -1 && c.rms_norm_eps == 1.0f &&
              c.rope_theta == 5e5f && c.rope_scaling == ROPE_SCALING_LINEAR && c.rope_scaling_factor == 4.0f &&
              c.tie_word_embeddings && strcmp(c.torch_dtype, "float16") == 0 && c.bos_token_id == 1,
          "gqa+model_type: fields");

    CHECK(parse("{\"model_type\": \"longllama\", \"hidden_size\": 64, \"intermediate_size\": 128,"
                " \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"vocab_size\": 100, \"mem_layers\": [3, 0],"
                " \"mem_dtype\": \"float32\", \"mem_attention_grouping\": [4, 2048], \"mem_positionals\": false,"
                " \"last_context_length\": 3072}",
                &c, err, sizeof err) == 0,
          "longllama model_type: %s", err);
    CHECK(c.is_longllama && c.n_mem_layers == 2 && c.mem_layers[0] == 3 && c.mem_dtype == KERN_F32 &&
              c.mem_attention_grouping[0] == 4 && c.mem_attention_grouping[1] == 2048 && !c.mem_positionals &&
              c.last_context_length == 3072,
          "longllama model_type: fields");

    /* transformers 5: rope_parameters only, theta inside it */
    CHECK(parse("{" BASE ", \"rope_parameters\": {\"rope_theta\": 1000000.0, \"rope_type\": \"default\"}}", &c, err,
                sizeof err) == 0 && c.rope_theta == 1e6f && c.rope_scaling == ROPE_SCALING_NONE,
          "rope_parameters default: %s", err);
    CHECK(parse("{" BASE ", \"rope_parameters\": {\"rope_theta\": 10000.0, \"rope_type\": \"linear\", \"factor\": 8}}",
                &c, err, sizeof err) == 0 && c.rope_scaling == ROPE_SCALING_LINEAR && c.rope_scaling_factor == 8.0f,
          "rope_parameters linear: %s", err);
    CHECK(parse("{" BASE ", \"rope_scaling\": {\"type\": \"default\"}}", &c, err, sizeof err) == 0 &&
              c.rope_scaling == ROPE_SCALING_NONE,
          "rope default: %s", err);
    /* LongLLaMA fields are ignored on a plain LLaMA */
    CHECK(parse("{" BASE ", \"mem_layers\": [99], \"mem_dtype\": \"int8\"}", &c, err, sizeof err) == 0 &&
              c.n_mem_layers == 0,
          "llama ignores mem_*: %s", err);
}

static const struct {
    const char *json;
    const char *want;
} bad[] = {
    {"{\"architectures\": [\"GPT2LMHeadModel\"], \"hidden_size\": 64}",
     "config.json: architecture 'GPT2LMHeadModel' is not supported (LlamaForCausalLM, LongLlamaForCausalLM)"},
    {"{\"model_type\": \"mistral\"}", "model_type 'mistral' is not supported"},
    {"{\"hidden_size\": 64}", "missing 'architectures'"},
    {"{\"architectures\": []}", "'architectures' must be a non-empty list"},
    {"{\"architectures\": \"LlamaForCausalLM\"}", "'architectures' must be a non-empty list"},
    {"{" BASE ", \"hidden_act\": \"gelu\"}", "hidden_act 'gelu' is not supported (silu)"},
    {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": \"64\"}",
     "config.json: field 'hidden_size' must be an integer, got string"},
    {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64.0}",
     "field 'hidden_size' must be an integer, got real"},
    {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64}", "missing required field 'intermediate_size'"},
    {"{" BASE ", \"hidden_size\": 0}", "not valid JSON"}, /* duplicate key */
    {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 0, \"intermediate_size\": 128, "
     "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100}",
     "field 'hidden_size' must be in 1..1048576, got 0"},
    {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
     "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 4294967296}",
     "field 'vocab_size' must be in 1..1048576"},
    {"{" BASE ", \"num_key_value_heads\": 3}", "num_attention_heads 4 is not a multiple of num_key_value_heads 3"},
    {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 66, \"intermediate_size\": 128, "
     "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100}",
     "hidden_size 66 is not divisible by num_attention_heads 4"},
    {"{" BASE ", \"head_dim\": 15}", "head_dim 15 must be even"},
    {"{" BASE ", \"head_dim\": 0}", "field 'head_dim' must be in 1.."},
    {"{" BASE ", \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2}}",
     "rope_scaling type 'dynamic' is not supported (linear)"},
    {"{" BASE ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8}}", "type 'llama3' is not supported"},
    {"{" BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 8}}", "type 'yarn' is not supported"},
    {"{" BASE ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 0}}", "field 'factor' must be a positive number"},
    {"{" BASE ", \"rope_scaling\": {\"type\": \"linear\"}}", "needs a 'factor'"},
    {"{" BASE ", \"rope_scaling\": {\"factor\": 2}}", "needs a 'type' or 'rope_type'"},
    {"{" BASE ", \"rope_scaling\": \"linear\"}", "field 'rope_scaling' must be an object or null, got string"},
    {"{" BASE ", \"rope_theta\": -1}", "field 'rope_theta' must be a positive number"},
    {"{" BASE ", \"rope_theta\": \"1e4\"}", "field 'rope_theta' must be a number, got string"},
    {"{" BASE ", \"rms_norm_eps\": 0}", "field 'rms_norm_eps' must be a positive number"},
    {"{" BASE ", \"rms_norm_eps\": 1e300}", "field 'rms_norm_eps' must be a positive number"},
    {"{" BASE ", \"tie_word_embeddings\": 1}", "field 'tie_word_embeddings' must be true or false, got integer"},
    {"{" BASE ", \"qk_norm\": \"yes\"}", "field 'qk_norm' must be true or false, got string"},
    {"{" BASE ", \"eos_token_id\": []}", "eos_token_id' must be an integer or a list"},
    {"{" BASE ", \"eos_token_id\": [1,2,3,4,5,6,7,8,9]}", "eos_token_id' must be an integer or a list"},
    {"{" BASE ", \"eos_token_id\": [2, \"3\"]}", "field 'eos_token_id' must be an integer, got string"},
    {"{" BASE ", \"eos_token_id\": 100}", "field 'eos_token_id' must be in 0..99, got 100"},
    {"{" BASE ", \"bos_token_id\": -5}", "field 'bos_token_id' must be in 0..99"},
    {"{" BASE ", \"pad_token_id\": 1.5}", "field 'pad_token_id' must be an integer, got real"},
    {"{" BASE ", \"max_position_embeddings\": -2048}", "field 'max_position_embeddings' must be in 1.."},
    {"{\"architectures\": [\"LongLlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
     "\"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"vocab_size\": 100, \"mem_layers\": [1, 4]}",
     "field 'mem_layers' must be in 0..3, got 4"},
    {"{\"architectures\": [\"LongLlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
     "\"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"vocab_size\": 100, \"mem_layers\": [1, 1]}",
     "field 'mem_layers' lists layer 1 twice"},
    {"{\"architectures\": [\"LongLlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
     "\"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"vocab_size\": 100, \"mem_layers\": 2}",
     "field 'mem_layers' must be a list"},
    {"{\"architectures\": [\"LongLlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
     "\"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"vocab_size\": 100, \"mem_dtype\": \"int8\"}",
     "mem_dtype 'int8' is not supported (bfloat16, float16, float32)"},
    {"{\"architectures\": [\"LongLlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
     "\"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"vocab_size\": 100, \"mem_attention_grouping\": [4]}",
     "field 'mem_attention_grouping' must be null or [heads, queries]"},
    {"{\"architectures\": [\"LongLlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
     "\"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"vocab_size\": 100, \"mem_attention_grouping\": [0, 8]}",
     "field 'mem_attention_grouping' must be in 1.."},
    {"{\"architectures\": [\"LongLlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
     "\"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"vocab_size\": 100, "
     "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2}}",
     "rope_scaling 'linear' is not supported for LongLlamaForCausalLM (it must be null)"},
    {"{\"architectures\": [\"LongLlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
     "\"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"vocab_size\": 100, \"last_context_length\": 0}",
     "field 'last_context_length' must be in 1.."},
    {"{\"architectures\": [\"LongLlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
     "\"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"vocab_size\": 100, \"mem_positionals\": \"yes\"}",
     "field 'mem_positionals' must be true or false"},
    {"[1, 2]", "config.json: must be a JSON object, got array"},
    {"{\"architectures\": [\"LlamaForCausalLM\"],", "not valid JSON"},
    {"", "not valid JSON"},
};

static void test_bad(void) {
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        model_config c;
        char err[512] = "";
        int rc = parse(bad[i].json, &c, err, sizeof err);
        CHECK(rc == -1 && strstr(err, bad[i].want) && strncmp(err, "config.json: ", 13) == 0,
              "bad config %zu: got '%s', want '%s'", i, err, bad[i].want);
    }
    /* a NUL inside the text is invalid JSON, not a crash */
    model_config c;
    char err[256];
    CHECK(model_config_parse("{\0}", 3, "config.json", &c, err, sizeof err) == -1, "NUL accepted");
}

int main(void) {
    test_fixture_configs();
    test_valid();
    test_bad();
    return test_summary();
}
