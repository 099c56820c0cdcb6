/* hello: the smallest program that writes: one write system call, exit status 0. */
#include "sys.h"

int main(void)
{
    print_str("Hello, world!\n");
    return 0;
}
