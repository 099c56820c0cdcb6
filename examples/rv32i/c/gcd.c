/* gcd: Euclid's algorithm by subtraction and by remainder (libgcc's __umodsi3) on a few
   pairs, with a string reversal of the result line; exits with the last gcd. */
#include "sys.h"

static u32 gcd_sub(u32 a, u32 b)
{
    while (a != b) {
        if (a > b)
            a -= b;
        else
            b -= a;
    }
    return a;
}

static u32 gcd_mod(u32 a, u32 b)
{
    while (b) {
        u32 t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int main(void)
{
    static const u32 pairs[][2] = {{12, 18}, {1071, 462}, {17, 5}, {360, 840}, {4096, 1024}};
    u32 g = 0;
    for (u32 i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        g = gcd_sub(pairs[i][0], pairs[i][1]);
        u32 h = gcd_mod(pairs[i][0], pairs[i][1]);
        print_str("gcd(");
        print_uint(pairs[i][0]);
        print_char(',');
        print_uint(pairs[i][1]);
        print_str(")=");
        print_uint(g);
        print_char(g == h ? '\n' : '!');
    }
    return (int)g;
}
