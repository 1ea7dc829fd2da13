/*
 * finetune_files.h — the uploaded files of the OpenAI files API (purpose "fine-tune"), kept in <jobs-dir>/files:
 * <id>.jsonl (the bytes as uploaded) and <id>.json (the file object: id, object "file", bytes, created_at, filename,
 * purpose, status "processed"), each written to a temp name and renamed, so a crash never leaves half a file and a
 * restart finds every file that was acknowledged. Ids are "file-" + 24 lowercase hex digits; anything else (a path,
 * "../") is not an id and is never turned into a path.
 *
 * Upload validation: the bytes must be UTF-8 JSON lines, each non-blank line an object that is either
 * {"prompt": string, "completion": string} or {"messages": [{"role": string, "content": string}, ...]}; the first bad
 * line is a 400 naming the line ("training file line 3: ..."); the role rules and a non-empty completion follow
 * mnemo train's reader (engine/src/train/train_data.h). An empty file (or only blank lines) is a 400. Lengths against
 * a model's window and the chat template's rules are checked when a job uses the file (validating_files), since they
 * depend on the model. Thread-safe (one mutex).
 */
#ifndef MNEMO_SERVER_FINETUNE_FILES_H
#define MNEMO_SERVER_FINETUNE_FILES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "api_error.h"

typedef struct ft_files ft_files;

/* Creates <jobs_dir>/files if needed and loads the file objects found there. NULL with a message on failure. */
ft_files *ft_files_open(const char *jobs_dir, int max_files, char *err, size_t errlen);
void ft_files_close(ft_files *f);

/* Validates and stores an upload. 0 with *out (a new reference to the file object), or -1 with e filled (400 bad
 * purpose / not JSONL naming the line, 429 too many files, 500 a write error). */
int ft_files_create(ft_files *f, const char *filename, size_t filename_len, const char *purpose, const char *data,
                    size_t len, json_t **out, api_error *e);
/* {"object": "list", "data": [...], "first_id", "last_id", "has_more": bool} newest first (order "desc", the
 * default) or oldest first ("asc"), after the id `after` (NULL: from the start), at most limit (1..10000) objects,
 * purpose NULL = any. NULL when `after` names no file (or out of memory). */
json_t *ft_files_list(ft_files *f, const char *purpose, const char *after, int limit, bool ascending);
/* A new reference to the file object, or NULL when there is no such file. */
json_t *ft_files_get(ft_files *f, const char *id);
/* 0, or -1 when there is no such file, or -2 when it could not be removed (an I/O error: it stays listed). */
int ft_files_delete(ft_files *f, const char *id);
/* The path of the file's content; false when there is no such file. */
bool ft_files_path(ft_files *f, const char *id, char *out, size_t cap);
/* "file-" + 24 lowercase hex digits. */
bool ft_files_valid_id(const char *id);
/* The upload validation alone (see above; ft_files_create runs it): 0, or -1 with e filled (400, param "file"). */
int ft_files_validate(const char *data, size_t len, api_error *e);
/* Files kept now. */
size_t ft_files_count(ft_files *f);

struct pg_pool;
/* The files kept in the state database (--state postgresql://...), shared by every node; the same contract, the
 * bytes a caller reads through ft_files_path fetched once into <work_dir>/files. NULL with a message on failure. */
ft_files *ft_files_open_pg(struct pg_pool *pool, const char *work_dir, int max_files, char *err, size_t errlen);
/* True for a store opened with ft_files_open_pg. */
bool ft_files_remote(const ft_files *f);
/* Why this thread's last ft_files_list / _get / _delete / _path found nothing or failed: status 404 (no such file,
 * or no `after`), 503 (the state database is unavailable) or 500, with a message. */
const api_error *ft_files_last_error(void);

#endif
