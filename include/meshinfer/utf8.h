#ifndef MESHINFER_UTF8_H
#define MESHINFER_UTF8_H

#include <stddef.h>

/* UTF-8 as Unicode defines it well-formed: no overlong forms, no surrogates
 * (U+D800..DFFF), nothing past U+10FFFF. One definition for the tokenizer
 * (byte-fallback pieces), the server's streamer (characters split across
 * tokens) and the CLI's JSON output. */

/* How far s[0, n) (n >= 1) goes as the start of one well-formed sequence:
 * returns the count of its leading bytes that fit (1..4) and sets *need to
 * the length of the whole sequence s[0] begins (1 for ASCII; 0 when s[0]
 * begins none, a stray continuation byte or C0, C1, F5..FF, and then the
 * return is 1). The sequence is whole when the return equals *need > 0; a
 * shorter return is Unicode's "maximal subpart" that one U+FFFD replaces,
 * or, at the end of s, a character that more bytes may complete. */
int mi_utf8_start(const unsigned char *s, size_t n, int *need);

/* The length (1..4) of the whole well-formed sequence at s[0, n) (n >= 1),
 * 0 when it is malformed or cut short by n. */
int mi_utf8_len(const unsigned char *s, size_t n);

#endif
