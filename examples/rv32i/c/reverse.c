/* reverse: reverses strings in place (two indices meeting in the middle) and prints each
   before and after; exits with the number of palindromes among them (3: "racecar", "a", ""). */
#include "sys.h"

static char text[][40] = {
    "Hello, world!",
    "RISC-V in a transformer",
    "racecar",
    "a",
    "",
    "never odd or even",
    "0123456789",
};

static void reverse(char *s)
{
    u32 i = 0, j = str_len(s);
    while (i + 1 < j) {
        char t = s[i];
        s[i++] = s[--j];
        s[j] = t;
    }
}

static int same(const char *a, const char *b)
{
    while (*a && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

int main(void)
{
    int palindromes = 0;
    char copy[40];
    for (u32 k = 0; k < sizeof text / sizeof text[0]; k++) {
        u32 n = str_len(text[k]);
        for (u32 i = 0; i <= n; i++)
            copy[i] = text[k][i];
        reverse(text[k]);
        print_str(copy);
        print_str(" -> ");
        print_str(text[k]);
        print_char('\n');
        palindromes += same(copy, text[k]);
    }
    return palindromes;
}
