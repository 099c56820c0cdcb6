/* primes: the sieve of Eratosthenes below 1000; prints the primes on lines of ten and exits
   with their count mod 256 (168). */
#include "sys.h"

#define LIMIT 1000

static unsigned char composite[LIMIT];

int main(void)
{
    int count = 0;
    for (int i = 2; i < LIMIT; i++) {
        if (composite[i])
            continue;
        for (int j = i + i; j < LIMIT; j += i)
            composite[j] = 1;
        print_uint((u32)i);
        count++;
        print_char(count % 10 ? ' ' : '\n');
    }
    print_char('\n');
    return count & 255;
}
