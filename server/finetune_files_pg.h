/*
 * finetune_files_pg.h — the files API kept in the state database (--state postgresql://...): the same contract as
 * finetune_files.h, shared by every node. finetune_files.c hands each call here when its store was opened with
 * ft_files_open_pg. Rows of mnemo_files (the file object, the bytes as a blob); the bytes a job or GET .../content
 * needs are fetched into <work_dir>/files once (a file's bytes never change under its id).
 */
#ifndef MNEMO_SERVER_FINETUNE_FILES_PG_H
#define MNEMO_SERVER_FINETUNE_FILES_PG_H

#include "finetune_files.h"
#include "pg_pool.h"

typedef struct ffpg ffpg;

ffpg *ffpg_open(pg_pool *pool, const char *work_dir, int max_files, char *err, size_t errlen);
void ffpg_close(ffpg *f);
int ffpg_create(ffpg *f, json_t *obj, const char *data, size_t len, api_error *e); /* obj: the file object */
json_t *ffpg_list(ffpg *f, const char *purpose, const char *after, int limit, bool ascending, api_error *e);
json_t *ffpg_get(ffpg *f, const char *id, api_error *e);
int ffpg_delete(ffpg *f, const char *id, api_error *e); /* 0, -1 no such file, -2 the database failed (e) */
bool ffpg_path(ffpg *f, const char *id, char *out, size_t cap, api_error *e);
size_t ffpg_count(ffpg *f);

/* finetune_files.c's helpers, shared by both stores. */
json_t *ft_files_object(const char *id, size_t bytes, long long created, const char *filename, size_t fn_len,
                        const char *purpose);
int ft_files_new_id(char out[64]);

#endif
