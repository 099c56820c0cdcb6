/* sort100: 100 signed numbers from a linear congruential generator, sorted by insertion; prints
   them sorted, one line of 10 a row, and exits with the number of out-of-order pairs left (0). */
#include "sys.h"

#define N 100

static int values[N];

int main(void)
{
    u32 seed = 2026;
    for (int i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        values[i] = (int)(seed >> 16 & 0x3ff) - 512;
    }
    for (int i = 1; i < N; i++) {
        int v = values[i];
        int j = i - 1;
        while (j >= 0 && values[j] > v) {
            values[j + 1] = values[j];
            j--;
        }
        values[j + 1] = v;
    }
    for (int i = 0; i < N; i++) {
        print_int(values[i]);
        print_char(i % 10 == 9 ? '\n' : ' ');
    }
    int bad = 0;
    for (int i = 1; i < N; i++)
        bad += values[i - 1] > values[i];
    return bad;
}
