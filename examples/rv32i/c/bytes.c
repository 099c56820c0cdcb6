/* bytes: loads and stores of bytes and halves (signed and unsigned), shifts by constants and
   by registers, a string reversed in place, a checksum; exits with the checksum's low byte. */
#include "sys.h"

static char text[] = "RISC-V in a transformer";
static volatile signed char sbytes[8] = {-128, -1, 0, 1, 127, -2, 64, -65};
static volatile short halves[4] = {-32768, -1, 12345, 32767};
static volatile unsigned short uhalves[4] = {65535, 1, 40000, 0};

static void reverse(char *s)
{
    u32 n = str_len(s);
    for (u32 i = 0; i < n / 2; i++) {
        char t = s[i];
        s[i] = s[n - 1 - i];
        s[n - 1 - i] = t;
    }
}

int main(void)
{
    reverse(text);
    print_str(text);
    print_char('\n');

    u32 sum = 0;
    for (int i = 0; i < 8; i++) { /* LB: sign extension */
        int v = sbytes[i];
        sum = (sum << 3 | sum >> 29) ^ (u32)v;
        print_int(v);
        print_char(' ');
    }
    print_char('\n');
    for (int i = 0; i < 4; i++) { /* LH and LHU */
        int h = halves[i];
        u32 u = uhalves[i];
        sum += (u32)h * 3u + u;
        print_int(h);
        print_char('/');
        print_uint(u);
        print_char(' ');
    }
    print_char('\n');

    volatile u32 word = 0;
    volatile unsigned char *p = (volatile unsigned char *)&word;
    volatile unsigned short *q = (volatile unsigned short *)&word;
    p[0] = 0x78; /* SB, SH into one word: little-endian */
    p[3] = 0x12;
    q[0] = (unsigned short)(q[0] | 0x5600);
    p[2] = 0x34;
    print_hex(word);
    print_char('\n');

    volatile int by = 0;
    for (by = 0; by < 32; by += 7) { /* SLL, SRL, SRA by a register */
        i32 neg = -123456789;
        u32 x = 0x80000001u;
        print_hex(x << by);
        print_char(' ');
        print_hex(x >> by);
        print_char(' ');
        print_hex((u32)(neg >> by));
        print_char('\n');
        sum += (x << by) ^ (x >> by) ^ (u32)(neg >> by);
    }
    print_hex(sum);
    print_char('\n');
    return (int)(sum & 255);
}
