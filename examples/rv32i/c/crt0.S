# crt0 for the rv32i examples: set the stack pointer, call main, exit with its return value
# (Linux's exit system call: a7 = 93, the status in a0).
    .section .text.start, "ax"
    .globl _start
_start:
    la sp, __stack_top
    call main
    li a7, 93
    ecall
1:  j 1b
