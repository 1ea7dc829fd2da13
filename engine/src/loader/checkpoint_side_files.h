/*
 * checkpoint_side_files.h — the files beside a checkpoint's weights that a new checkpoint directory built from it
 * needs unchanged (config.json, the tokenizer, generation and special-token settings): mnemo export --merge and a
 * full fine-tuning run both write model.safetensors and copy these.
 */
#ifndef MNEMO_CHECKPOINT_SIDE_FILES_H
#define MNEMO_CHECKPOINT_SIDE_FILES_H

#include <stddef.h>

/* Copies each side file present in model_dir into out_dir (existing). 0, or -1 with a message naming the file. */
int checkpoint_copy_side_files(const char *model_dir, const char *out_dir, char *err, size_t errlen);

#endif
