/* mix: signed bytes and halves (LB, LH and arithmetic shifts), 64-bit arithmetic (libgcc's
   __muldi3 and carries by SLTU), a binary search over a table, a byte that wraps; exits with
   10 * the keys found + 4 (44). Written as a new user would. */
#include "sys.h"

static signed char sb[8] = {-128, -1, 0, 1, 127, -77, 55, -3};
static short sh[6] = {-32768, -2, 2, 32767, -1234, 4321};
static int sorted[16];

static int bsearch_i(const int *a, int n, int key)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) >> 1;
        if (a[mid] == key) return mid;
        if (a[mid] < key) lo = mid + 1; else hi = mid - 1;
    }
    return -1;
}

int main(void)
{
    int s = 0;
    for (int i = 0; i < 8; i++) s += sb[i] * (i + 1);
    for (int i = 0; i < 6; i++) s += sh[i] >> (i % 3);
    print_int(s); print_char('\n');
    unsigned long long x = 0x123456789ULL;
    for (int i = 0; i < 5; i++) x = x * 3 + (x >> 7);
    print_uint((u32)(x >> 32)); print_char(' '); print_uint((u32)x); print_char('\n');
    for (int i = 0; i < 16; i++) sorted[i] = i * i - 40;
    int found = 0;
    for (int k = -45; k < 200; k += 7) {
        int at = bsearch_i(sorted, 16, k);
        if (at >= 0) { print_int(k); print_char('@'); print_int(at); print_char(' '); found++; }
    }
    print_char('\n');
    unsigned char u = 250; u += 10;
    return found * 10 + u;
}
