/*
 * rope_config.h — position interpolation's config: training with linear RoPE
 * scaling F writes the base's config.json with rope_scaling {"type": "linear", "factor": F} and
 * max_position_embeddings scaled to the longer window, so the engine (and transformers) serve the result there.
 */
#ifndef MNEMO_ROPE_CONFIG_H
#define MNEMO_ROPE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

/* out_dir/config.json = model_dir/config.json with the two fields set (every other field kept; factor 0: RoPE as
 * it is, only the window: sparse memory training's positions reach past it). 0, or -1 with a message naming the
 * file. */
int rope_config_write(const char *model_dir, const char *out_dir, double factor, int32_t max_positions, char *err,
                      size_t errlen);

#endif
