/*
 * webui_assets.h — the web page's files (server/webui/), compiled into mnemo-server so that an installed server
 * needs no data files. The table is generated at build time by server/webui_embed.cmake: each file as written and
 * its gzip -n -9 compression (no name or time in the header, so the bytes depend on the content only).
 */
#ifndef MNEMO_SERVER_WEBUI_ASSETS_H
#define MNEMO_SERVER_WEBUI_ASSETS_H

#include <stddef.h>

typedef struct {
    const char *name;          /* path under server/webui/, e.g. "index.html", "chat.js" */
    const char *content_type;  /* from the extension */
    const unsigned char *raw;  /* the file's bytes */
    size_t raw_len;
    const unsigned char *gz;   /* the same, gzip-compressed */
    size_t gz_len;
    const char *hash;          /* the first 16 hex digits of raw's SHA-256: the ETag's stem */
} webui_asset;

extern const webui_asset WEBUI_ASSETS[];
extern const size_t WEBUI_N_ASSETS;

#endif
