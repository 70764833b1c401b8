/* Well-formed UTF-8 (see utf8.h). */
#include "meshinfer/utf8.h"

int mi_utf8_start(const unsigned char *s, size_t n, int *need)
{
    const unsigned char c = s[0];
    unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
    int len;
    if (c < 0x80) {
        len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        else if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        else if (c == 0xF4)
            hi = 0x8F; /* past U+10FFFF */
    } else {
        *need = 0; /* a continuation byte, an overlong C0/C1 lead, or F5..FF */
        return 1;
    }
    *need = len;
    int k = 1;
    for (; k < len && (size_t)k < n; k++) {
        const unsigned char b = s[k];
        if (k == 1 ? b < lo || b > hi : b < 0x80 || b > 0xBF)
            break;
    }
    return k;
}

int mi_utf8_len(const unsigned char *s, size_t n)
{
    int need;
    const int k = mi_utf8_start(s, n, &need);
    return need > 0 && k == need ? need : 0;
}
