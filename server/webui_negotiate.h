/*
 * webui_negotiate.h — the two header decisions the web page's files need (RFC 9110): may the reply be gzip
 * (Accept-Encoding, section 12.5.3), and does the client already hold this version (If-None-Match, section
 * 13.1.2). Pure functions on header values, so they are unit-tested without sockets.
 */
#ifndef MNEMO_SERVER_WEBUI_NEGOTIATE_H
#define MNEMO_SERVER_WEBUI_NEGOTIATE_H

#include <stdbool.h>

/* True when accept_encoding lists gzip (or "*") with a q-value above 0. NULL (no header) is false: the RFC
 * allows any coding then, but a client that sent nothing may not decode one. */
bool webui_accepts_gzip(const char *accept_encoding);

/* True when if_none_match is "*" or lists etag (a quoted strong tag, e.g. "\"ab12\""), compared weakly: a W/
 * prefix on the client's copy still matches, as the RFC asks for If-None-Match. NULL is false. */
bool webui_etag_matches(const char *if_none_match, const char *etag);

#endif
