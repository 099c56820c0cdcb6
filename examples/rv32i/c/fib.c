/* fib: the first 30 Fibonacci numbers, one a line; exits with F(29) mod 256 (181). */
#include "sys.h"

int main(void)
{
    u32 a = 0, b = 1;
    for (int i = 0; i < 30; i++) {
        print_uint(a);
        print_char('\n');
        u32 t = a + b;
        a = b;
        b = t;
    }
    return (int)((b - a) & 255); /* a = F(30), b = F(31): F(29) = b - a */
}
