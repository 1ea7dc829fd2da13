#include "layer_params.h"

const char *const LAYER_PARAM_NAMES[P_MAX_LAYER] = {
    "input_layernorm.weight",  "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight"};

void layer_param_shape(const model_config *c, size_t j, int64_t shape[2]) {
    const int64_t d = c->hidden_size, ff = c->intermediate_size, hd = c->head_dim;
    const int64_t qd = (int64_t)c->num_attention_heads * hd, kvd = (int64_t)c->num_key_value_heads * hd;
    const int64_t shapes[P_MAX_LAYER][2] = {{d, 0},  {qd, d}, {kvd, d}, {kvd, d}, {d, qd}, {d, 0},
                                            {ff, d}, {ff, d}, {d, ff},  {hd, 0},  {hd, 0}};
    shape[0] = shapes[j][0];
    shape[1] = shapes[j][1];
}
