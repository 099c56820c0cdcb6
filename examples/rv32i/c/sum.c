/* sum: 1 + 2 + ... + 100 in a loop; prints 5050 and exits with 5050 mod 256 (186). */
#include "sys.h"

int main(void)
{
    u32 s = 0;
    for (u32 i = 1; i <= 100; i++)
        s += i;
    print_uint(s);
    print_char('\n');
    return (int)(s & 255);
}
