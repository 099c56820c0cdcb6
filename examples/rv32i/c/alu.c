/* alu: every ALU operation of RV32I, immediate and register forms, on edge values (0, 1, -1,
   INT_MIN, INT_MAX, ...), with signed loads through pointers (LB, LH) and a FENCE; prints one
   hex line per input pair and exits with a checksum's low byte. */
#include "sys.h"

#define NOINLINE __attribute__((noinline))

static volatile u32 inputs[] = {0, 1, 2, 0xffffffffu, 0x80000000u, 0x7fffffffu, 0x12345678u,
                                0xfffff800u, 31, 33};
static signed char sb[4] = {-3, 100, -128, 7};
static short sh[4] = {-300, 30000, -32768, 5};

NOINLINE static int load_b(const signed char *p, int i) { return p[i]; }
NOINLINE static int load_h(const short *p, int i) { return p[i]; }

NOINLINE static u32 reg_ops(u32 a, u32 b)
{
    u32 r = a + b;
    r = r * 31u + (a - b);
    r ^= (u32)((i32)a < (i32)b) << 1;    /* SLT */
    r ^= (u32)(a < b) << 2;              /* SLTU */
    r = (r << 5 | r >> 27) ^ (a & b);    /* AND, OR, XOR */
    r += (a | b) ^ (a ^ b);
    r += a << (b & 31);                  /* SLL, SRL, SRA by a register */
    r += a >> (b & 31);
    r += (u32)((i32)a >> (b & 31));
    return r;
}

NOINLINE static u32 imm_ops(u32 a)
{
    u32 r = a + 2047u;                   /* ADDI */
    r ^= (u32)((i32)a < -5) << 3;        /* SLTI */
    r ^= (u32)(a < 17u) << 4;            /* SLTIU */
    r ^= a ^ 0x5a5u;                     /* XORI */
    r += (a | 0x0f0u) + (a & 0x7f0u);    /* ORI, ANDI */
    r += (a << 7) + (a >> 9) + (u32)((i32)a >> 13);
    return r;
}

int main(void)
{
    u32 n = sizeof inputs / sizeof inputs[0];
    u32 sum = 0;
    for (u32 i = 0; i < n; i++) {
        u32 a = inputs[i];
        print_hex(imm_ops(a));
        for (u32 j = 0; j < n; j++) {
            u32 r = reg_ops(a, inputs[j]);
            sum = (sum << 1 | sum >> 31) + r;
            print_char(j ? ' ' : ':');
            print_hex(r);
        }
        print_char('\n');
        __sync_synchronize(); /* FENCE */
    }
    for (int i = 0; i < 4; i++) {
        print_int(load_b(sb, i));
        print_char(' ');
        print_int(load_h(sh, i));
        print_char('\n');
        sum += (u32)load_b(sb, i) + (u32)load_h(sh, i);
    }
    print_hex(sum);
    print_char('\n');
    return (int)(sum & 255);
}
