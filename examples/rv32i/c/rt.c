/* memcpy and memset, which GCC may call for struct copies and array initialisers even in a
   freestanding program (built with -fno-tree-loop-distribute-patterns, so these loops are not
   turned back into calls to themselves). */
typedef unsigned int size_t;

void *memcpy(void *dst, const void *src, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    while (n--)
        *d++ = *s++;
    return dst;
}

void *memset(void *dst, int c, size_t n)
{
    unsigned char *d = dst;
    while (n--)
        *d++ = (unsigned char)c;
    return dst;
}
