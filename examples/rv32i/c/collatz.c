/* collatz: the total number of Collatz steps for 1..600 and the longest chain (a long run,
   over 100,000 instructions); exits with the longest chain's start mod 256. */
#include "sys.h"

int main(void)
{
    u32 total = 0, best = 0, best_n = 0;
    for (u32 n = 1; n <= 600; n++) {
        u32 v = n, steps = 0;
        while (v != 1) {
            v = (v & 1) ? 3 * v + 1 : v >> 1;
            steps++;
        }
        total += steps;
        if (steps > best) {
            best = steps;
            best_n = n;
        }
    }
    print_str("steps ");
    print_uint(total);
    print_str("\nlongest ");
    print_uint(best_n);
    print_char(' ');
    print_uint(best);
    print_char('\n');
    return (int)(best_n & 255);
}
