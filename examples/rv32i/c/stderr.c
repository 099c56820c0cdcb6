/* stderr: a diagnostic written to stderr (fd 2) between two lines on stdout, and a write of
   zero bytes; exits with 3. Written as a new user would (by a helper testing the interpreter):
   the compiled machine had printed stderr's bytes as stdout's. qemu prints only the stdout
   lines, and so must the model. */
#include "sys.h"

int main(void)
{
    print_str("before\n");
    sys_write(2, "warning: on stderr\n", 19);
    int n = sys_write(1, "x", 0);
    print_str("after ");
    print_int(n);
    print_char('\n');
    return 3;
}
