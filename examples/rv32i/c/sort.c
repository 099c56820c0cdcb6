/* sort: 24 signed numbers from a linear congruential generator, insertion-sorted; prints them
   before and after, exits with the number of out-of-order pairs left (0). */
#include "sys.h"

#define N 24

static int values[N];

static void show(void)
{
    for (int i = 0; i < N; i++) {
        print_int(values[i]);
        print_char(i + 1 < N ? ' ' : '\n');
    }
}

int main(void)
{
    u32 seed = 12345;
    for (int i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        values[i] = (int)(seed >> 16 & 0x7ff) - 1024;
    }
    show();
    for (int i = 1; i < N; i++) {
        int v = values[i];
        int j = i - 1;
        while (j >= 0 && values[j] > v) {
            values[j + 1] = values[j];
            j--;
        }
        values[j + 1] = v;
    }
    show();
    int bad = 0;
    for (int i = 1; i < N; i++)
        bad += values[i - 1] > values[i];
    return bad;
}
