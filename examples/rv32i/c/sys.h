/* write and exit as Linux's system calls (a7 = 64 write, a7 = 93 exit), and a few helpers
   for printing numbers, so the same ELF runs under qemu-riscv32 and the rv32i interpreter. */
#ifndef RV32I_SYS_H
#define RV32I_SYS_H

typedef unsigned int u32;
typedef int i32;

static inline int sys_write(int fd, const void *buf, u32 len)
{
    register int a0 __asm__("a0") = fd;
    register const void *a1 __asm__("a1") = buf;
    register u32 a2 __asm__("a2") = len;
    register int a7 __asm__("a7") = 64;
    __asm__ volatile("ecall" : "+r"(a0) : "r"(a1), "r"(a2), "r"(a7) : "memory");
    return a0;
}

static inline void sys_exit(int code)
{
    register int a0 __asm__("a0") = code;
    register int a7 __asm__("a7") = 93;
    __asm__ volatile("ecall" : : "r"(a0), "r"(a7) : "memory");
    for (;;) {
    }
}

static inline u32 str_len(const char *s)
{
    u32 n = 0;
    while (s[n])
        n++;
    return n;
}

static inline void print_str(const char *s) { sys_write(1, s, str_len(s)); }

static inline void print_char(char c) { sys_write(1, &c, 1); }

/* decimal, by repeated division (libgcc's __udivsi3/__umodsi3 on rv32i) */
static inline void print_uint(u32 v)
{
    char buf[12];
    int i = 12;
    do {
        buf[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    sys_write(1, buf + i, (u32)(12 - i));
}

static inline void print_int(i32 v)
{
    if (v < 0) {
        print_char('-');
        print_uint(0u - (u32)v);
    } else {
        print_uint((u32)v);
    }
}

static inline void print_hex(u32 v)
{
    char buf[8];
    for (int i = 7; i >= 0; i--) {
        u32 d = v & 15;
        buf[i] = (char)(d < 10 ? '0' + d : 'a' + d - 10);
        v >>= 4;
    }
    sys_write(1, buf, 8);
}

#endif
